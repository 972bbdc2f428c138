"""Continuous batching: which sequences run this step, and how many of their tokens. No torch.

Every step has a token budget. Running sequences go first, one-token decodes before prefill
chunks; then waiting sequences join as long as the budget, the sequence limit and the KV blocks
allow. A long prompt is cut into chunks that fit the budget and finishes over several steps beside
the decodes of others.

Prompts are read shortest remaining first, the running chunks and the waiting queue alike, so a
burst's short prompts reach their first token early while the long ones are chunked behind them
(a burst through the port arrives over many steps: each step's arrivals sorted among themselves
gave its first tokens by arrival wave). A prompt that has waited ``MAX_WAIT_STEPS`` steps since it
arrived goes before every shorter one, in arrival order: no prompt waits on later, shorter ones
for longer than that.

When a running sequence needs a block and none is free, the youngest running sequence not
yet scheduled this step is preempted: its blocks are freed and it waits at the head of the
queue to be computed again from its tokens (preemption by recompute).

A decoding sequence may come with a draft (speculative decoding): tokens that may follow its
pending one, computed in the same step after it, like a chunk of prefill. A draft takes only
budget and blocks the other decodes of the step do not need, and never preempts anyone; after the
step, the blocks of the drafted tokens that were not kept are given back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from engine.backends.fair_share import MAX_WAIT_STEPS, prompt_order
from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.sequence import Sequence, SequenceStatus


@dataclass(frozen=True, slots=True)
class ScheduledSeq:
    """``num_tokens`` tokens of ``seq`` to compute this step, from ``seq.num_computed_tokens`` on, then the
    drafted tokens ``draft`` (a decode only), each row giving logits to verify the next."""

    seq: Sequence
    num_tokens: int
    draft: tuple[int, ...] = ()

    @property
    def num_rows(self) -> int:
        """Rows of the step's batch: the sequence's tokens and the drafted ones."""
        return self.num_tokens + len(self.draft)

    @property
    def samples(self) -> bool:
        """Whether this step reaches the sequence's last token, so its logits give the next one."""
        return self.seq.num_computed_tokens + self.num_tokens == self.seq.num_tokens


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    scheduled: tuple[ScheduledSeq, ...]
    preempted: tuple[Sequence, ...] = ()

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_rows for s in self.scheduled)

    @property
    def num_draft_tokens(self) -> int:
        return sum(len(s.draft) for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Decides each step's batch and keeps the waiting and running queues.

    Args:
        config: Budgets and limits.
        block_manager: The KV blocks the sequences draw from.
    """

    def __init__(self, config: EngineConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.num_steps = 0
        self._arrived = 0  # sequences added at the tail of the queue since the last schedule

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        seq.arrival_step = self.num_steps
        self.waiting.append(seq)
        self._arrived += 1

    def finish(self, seq: Sequence) -> None:
        """Take ``seq`` out of the queues and free its blocks at once (finished or cancelled)."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED

    def schedule(self, drafts: Mapping[int, Seq[int]] | None = None) -> SchedulerOutput:
        """This step's batch; ``drafts`` maps a decoding sequence's id to the tokens it drafts (what fits is
        taken)."""
        self.num_steps += 1
        self._order_arrivals()
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        chosen: set[int] = set()
        preempted: list[Sequence] = []
        decodes: list[Sequence] = []
        prefills: list[Sequence] = []
        for s in self.running:
            uncomputed = s.num_uncomputed_tokens
            if uncomputed == 1:
                decodes.append(s)
            elif uncomputed > 1:
                prefills.append(s)
        if len(prefills) > 1:
            prefills.sort(key=self._prompt_order)
        # decodes still to schedule, and the blocks they need: a draft leaves them their rows and blocks
        later_decodes = len(decodes)
        bm = self.block_manager
        later_blocks = sum(bm.new_blocks(s, 1) for s in decodes) if drafts else 0
        for seq in decodes + prefills:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this step
            uncomputed = seq.num_uncomputed_tokens
            n = min(uncomputed, budget)
            draft: tuple[int, ...] = ()
            if uncomputed == 1:
                later_decodes -= 1
                if drafts:
                    later_blocks -= bm.new_blocks(seq, 1)
                if drafts and seq.seq_id in drafts:
                    draft = self._fitting_draft(seq, drafts[seq.seq_id], budget - 1 - later_decodes, later_blocks)
                    n += len(draft)
            if bm.new_blocks(seq, n):  # most decodes fit the last block they hold: nothing to find or grow
                while not bm.can_append(seq, n):
                    victim = self._victim(chosen)
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is seq:
                        break
                if seq.status is not SequenceStatus.RUNNING:
                    continue
                bm.append_slots(seq, n)
            scheduled.append(ScheduledSeq(seq, n - len(draft), draft))
            chosen.add(seq.seq_id)
            budget -= n
        if not preempted:
            budget = self._admit(budget, scheduled)
        return SchedulerOutput(tuple(scheduled), tuple(preempted))

    def postprocess(self, output: SchedulerOutput, sampled: Mapping[int, int | Seq[int]]) -> None:
        """Record the computed tokens and append what each sequence sampled (keyed by seq_id): a token, or
        the drafted tokens it kept followed by the token sampled after them. A drafted token that was not
        kept loses its KV slot, and the blocks that held only such tokens go back to the pool before any
        block is registered in the prefix cache."""
        bm = self.block_manager
        for item in output.scheduled:
            seq = item.seq
            got = sampled.get(seq.seq_id)
            if got is None or isinstance(got, int):  # a prefill chunk, or one token sampled: the common step
                if got is not None:
                    seq.append_token(got)
                seq.num_computed_tokens += item.num_tokens
                if item.draft:
                    bm.trim(seq)
            else:
                tokens = tuple(got)
                kept = max(0, len(tokens) - 1)
                if kept > len(item.draft) or tokens[:kept] != item.draft[:kept]:
                    raise RuntimeError(f"sequence {seq.seq_id} kept tokens it did not draft")
                for token in tokens:
                    seq.append_token(token)
                seq.num_computed_tokens += item.num_tokens + kept
                if kept < len(item.draft):
                    bm.trim(seq)
            bm.commit(seq)

    # -- internals ----------------------------------------------------------------------------
    def _prompt_order(self, seq: Sequence) -> tuple[int, int]:
        """Where ``seq``'s prompt goes among those to read: after waiting ``MAX_WAIT_STEPS`` steps by arrival,
        else by the tokens it has left to read."""
        return prompt_order(self.num_steps, seq.arrival_step, seq.num_uncomputed_tokens, MAX_WAIT_STEPS)

    def _order_arrivals(self) -> None:
        """When requests arrived since the last step: the waiting queue in prompt order (ties keep their order),
        behind the preempted sequences, which go first as they were."""
        if not self._arrived:
            return
        self._arrived = 0
        if len(self.waiting) > 1:
            waiting = list(self.waiting)
            resumed = [s for s in waiting if s.num_preemptions]
            rest = sorted((s for s in waiting if not s.num_preemptions), key=self._prompt_order)  # stable
            self.waiting = deque(resumed + rest)

    def _fitting_draft(self, seq: Sequence, draft: Seq[int], rows: int, spare_blocks: int) -> tuple[int, ...]:
        """As much of ``draft`` as fits ``rows`` rows and the free blocks, ``spare_blocks`` of them left over."""
        draft = tuple(draft[: max(0, rows)])
        bm = self.block_manager
        while draft and bm.new_blocks(seq, 1 + len(draft)) > bm.num_free_blocks - spare_blocks:
            draft = draft[: len(draft) - 1]
        return draft

    def _admit(self, budget: int, scheduled: list[ScheduledSeq]) -> int:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            cached = len(self.block_manager.match_prefix(seq)) * self.block_manager.block_size
            n = min(seq.num_tokens - cached, budget)
            if not self.block_manager.can_allocate(seq, n):
                break
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            n = min(seq.num_uncomputed_tokens, budget)
            self.block_manager.append_slots(seq, n)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            scheduled.append(ScheduledSeq(seq, n))
            budget -= n
        return budget

    def _victim(self, chosen: set[int]) -> Sequence:
        for seq in reversed(self.running):
            if seq.seq_id not in chosen:
                return seq
        raise RuntimeError("no sequence can be preempted; the KV cache is too small for one step")

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)
        self.num_preemptions += 1


__all__ = ["Scheduler", "SchedulerOutput", "ScheduledSeq"]
