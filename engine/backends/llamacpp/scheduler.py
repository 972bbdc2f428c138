"""Continuous batching over one llama.cpp context with several sequence slots.

One thread owns the context. Each step computes chunks of waiting prompts (under a
per-step token budget, each in calls of its own; while other sequences decode, a long prompt's
blocks take at most :data:`PREFILL_SHARE` of the time), then decodes one batch holding the next
token of every running sequence, those whose prompts it has just finished included; every
sequence samples with its own sampler chain and streams its text.

Slots are llama.cpp sequence ids, each with a KV stream of its own; a finished sequence leaves
its tokens in its slot as a cached prefix for the next prompt that begins with them
(:mod:`engine.backends.llamacpp.slots`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from engine.backends.admission import AdmissionQueue
from engine.backends.base import BackendStats
from engine.backends.delivery import delivery_batch
from engine.backends.fair_share import next_admitted, one_row_per_request, preemption_victim, prompt_order
from engine.backends.llamacpp.batch import Row, fill_batch
from engine.backends.llamacpp.calls import CallQueue
from engine.backends.llamacpp.context import decode_context
from engine.backends.llamacpp.media import MediaChunk, MediaPrompt, Projector
from engine.backends.llamacpp.model import GGUFModel
from engine.backends.llamacpp.overrides import RopeScaling
from engine.backends.llamacpp.sequence import SeqStatus, Sequence
from engine.backends.llamacpp.slots import Slot, SlotTable
from engine.backends.llamacpp.team import ComputeTeam
from engine.backends.speculative import RowCost
from engine.backends.threads import CpuSample
from engine.errors import GrammarDeadEnd, GrammarTooSlow, Overloaded, RequestCancelled
from engine.fit.plan import PREFILL_BLOCK_CPU
from engine.types import FinishReason, TokenLogprob

log = logging.getLogger(__name__)

# Drafted rows fill a step's batch up to this many rows in all: below it a step costs about the same as one
# row (it reads every weight once either way); past it the step is bound by compute, and drafts that many
# streams would check cost more than the steps they save.
DRAFT_BATCH_ROWS = 16
# Rows a step computes of a prompt whose every token's log-probability is asked for (echo with logprobs): each
# row's logits cost the output layer (the vocabulary times the width), and the context keeps room for them all
# (a 150k-token vocabulary: 600 KB a row). The other streams' steps wait on no more than these.
SCORED_ROWS = 16
#: While other sequences decode, a prompt with more than one block left computes its blocks for at most this many
#: seconds per second of decoding (half the time at 1.0): a block deep in a long prompt takes over a second on a
#: small CPU, and every stream's next token waited on one block a step (a 3,700-token prompt made an 8-token answer
#: beside it take 10 s).
PREFILL_SHARE = 1.0


@dataclass(slots=True)
class StepPlan:
    """One decode step's batch: who decodes in it and with what drafts."""

    ready: list[Sequence]  # every decoding sequence, in slot order
    decoding: list[Sequence]  # those with rows in this step
    rows: list[Row] = field(default_factory=list)
    drafts: list[tuple[Sequence, int, list[int]]] = field(default_factory=list)  # each one's first row and draft


class DecodeLoop(AdmissionQueue[Sequence]):
    """Owns a llama.cpp context and serves every request of one model in batches.

    Args:
        model: The loaded GGUF model.
        n_seq_max: Sequence slots (requests decoded at once).
        n_ctx_seq: Context length of each sequence.
        n_threads: CPU threads for decoding on a quiet machine.
        adapt_threads: Use fewer threads while other processes keep cores busy (see
            `engine.backends.threads`); False keeps ``n_threads`` whatever the machine does.
        cpu_sample: Reads the machine's CPU counters for the thread policy, None where it cannot
            (default: those of the CPUs this process may use).
        prefill_chunk: Most prompt tokens put into one step beside the decodes.
        prefill_block: Most prompt tokens in one llama.cpp call (prompts are cut at its multiples); with the
            slots, it sizes llama.cpp's micro-batch (see `engine.fit.plan.prefill_block`).
        max_waiting: Most requests waiting for a slot (beyond the ``n_seq_max`` running) before new ones are refused.
        flash_attn: Use flash attention (a quantized KV cache needs it).
        kv_unified: One KV buffer for every slot instead of one per slot.
        kv_type: The ggml type of the KV cache (F16, Q8_0, Q4_0).
        rope: YaRN RoPE scaling (None: the model file's own).
        projector: The model's multimodal projector, for prompts with pictures or sounds (None: text only).
    """

    def __init__(
        self,
        model: GGUFModel,
        *,
        n_seq_max: int,
        n_ctx_seq: int,
        n_threads: int,
        adapt_threads: bool = False,
        cpu_sample: Callable[[], CpuSample | None] | None = None,
        prefill_chunk: int = 256,
        prefill_block: int = PREFILL_BLOCK_CPU,
        max_waiting: int = 64,
        flash_attn: bool = True,
        kv_unified: bool = False,
        kv_type: int = llama_cpp.GGML_TYPE_F16,
        rope: RopeScaling | None = None,
        projector: Projector | None = None,
    ) -> None:
        self.model = model
        self.projector = projector
        self.n_seq_max = n_seq_max
        self.n_ctx_seq = n_ctx_seq
        self.prefill_chunk = prefill_chunk
        super().__init__(max_waiting, max_running=n_seq_max)
        self.prefill_block = prefill_block
        self.n_batch = max(prefill_block, n_seq_max)
        # A picture decoded with non-causal attention (Gemma 3: 256 tokens) must fit one micro-batch, llama.cpp's
        # and ours: the context's batch grows to it, with no more rows of logits than the loop's own calls ask for
        # (their buffer, the largest part of the compute buffer, keeps its size).
        self.media_batch = max(self.n_batch, projector.non_causal_tokens if projector is not None else 0)
        self.ctx: llama_cpp.llama_context_p = decode_context(
            model, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq_max, n_batch=self.media_batch, n_outputs=self.n_batch,
            n_threads=n_threads, flash_attn=flash_attn, kv_unified=kv_unified, kv_type=kv_type, rope=rope,
        )  # fmt: skip
        self.mem = llama_cpp.llama_get_memory(self.ctx)  # None for an encoder, which keeps no KV cache
        n_swa = int(llama_cpp.llama_model_n_swa(model.model_ptr))  # a sliding window's tokens (Gemma); 0: none
        self.slots = SlotTable(self.ctx, self.mem, n_seq_max, n_swa=n_swa, kv_unified=kv_unified)
        self.batch: llama_cpp.llama_batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._freed = False
        self._running: list[Sequence] = []
        self.stats_prompt_tokens = 0
        self.stats_requests = 0
        self.stats_generated_tokens = 0
        self.stats_draft_tokens = 0  # speculative decoding: tokens drafted, and of them kept
        self.stats_accepted_tokens = 0
        self.stats_paused = 0  # sequences that gave their slot to another request (engine.backends.fair_share)
        self._steps = 0  # decode steps run
        # Seconds of prompt blocks the decoding streams are still owed (<= 0; see PREFILL_SHARE); with none decoding,
        # at most the last block's: a stream that starts decoding is owed the block that ran while it waited
        self._prefill_credit = 0.0
        self._last_block = 0.0
        self.row_cost = RowCost()  # what a drafted row adds to a step, measured
        self.calls = CallQueue(self._cond)  # embeddings and reranking, between two steps
        self.team = ComputeTeam(self.ctx, n_threads, adapt=adapt_threads, cpu_sample=cpu_sample, projector=projector)
        self._thread = threading.Thread(target=self._run, name=f"decode-{model.path.name}", daemon=True)
        self._thread.start()

    # -- called from request threads ------------------------------------------------------------
    def stats(self) -> BackendStats:
        with self._cond:
            running = len(self._running)
            waiting = len(self._waiting)
        return BackendStats(
            running=running, waiting=waiting, slots=self.n_seq_max, n_ctx_per_sequence=self.n_ctx_seq,
            max_waiting=self.max_waiting,
            requests=self.stats_requests, prompt_tokens=self.stats_prompt_tokens,
            generated_tokens=self.stats_generated_tokens, prefix_cache_tokens=self.slots.cached_tokens,
            details={
                "prefix_cache_hits": self.slots.prefix_hits, "draft_tokens": self.stats_draft_tokens,
                "accepted_draft_tokens": self.stats_accepted_tokens, "paused_sequences": self.stats_paused,
                **self.team.policy.as_dict(),
                "media_encoded": self.projector.encoded if self.projector is not None else 0,
            },
        )  # fmt: skip

    @property
    def generating(self) -> bool:
        """Whether requests are generating (for the calls the loop runs between its steps, on its thread)."""
        return bool(self._running)

    @property
    def n_threads(self) -> int:
        """The threads the loop computes on now (other compute on its thread should use as many)."""
        return self.team.policy.threads

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the decode thread between two steps and return what it returns.

        For other llama.cpp compute on this model (embeddings, reranking; see
        :mod:`engine.backends.llamacpp.calls`): while requests generate, the calls get a share of the decode
        steps' time.

        Raises:
            Overloaded: the model is being unloaded.
            Exception: whatever ``fn`` raised.
        """
        with self._cond:
            if self._stopping:
                raise Overloaded("The model is being unloaded; retry the request.", retry_after=1.0)
            future = self.calls.add(fn)
            self._cond.notify()
        return future.result()

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=30)
        if not self._freed:
            self._freed = True
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ctx)

    # -- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._waiting and not self._running and not self.calls.pending:
                    poll = self.team.policy.idle_poll()  # on fewer threads: see whether the machine went quiet
                    if poll is None:
                        self.team.policy.rest()
                    self._cond.wait(poll)
                    if poll is not None:
                        self.team.follow_machine()
                if self._stopping:
                    for seq in [*self._running, *self._waiting]:
                        self._finish(seq, "cancelled")
                    self._waiting.clear()
                    self._running.clear()
                    self.calls.fail(lambda: Overloaded("The model is being unloaded; retry the request.", 1.0))
                    return
                self._reap_cancelled()
                self._admit()
            self.team.follow_machine()
            self.calls.run(generating=bool(self._running))
            if self._running:
                t0 = time.perf_counter()
                self.team.fit()
                try:
                    self._step()
                except Exception as exc:  # never let one bad step kill the loop
                    log.exception("decode step failed")
                    for seq in list(self._running):
                        self._finish(seq, "error", error=f"Generation failed: {exc}.")
                self.calls.earn(time.perf_counter() - t0)

    @property
    def compute_threads(self) -> int:
        """The threads the last step computed on: :attr:`n_threads`, or one fewer while pictures were read."""
        return self.team.threads

    def _reap_cancelled(self) -> None:
        for seq in [s for s in self._waiting if s.cancelled]:
            self._waiting.remove(seq)
            self._finish(seq, "cancelled")
        for seq in [s for s in self._running if s.cancelled]:
            self._finish(seq, "cancelled")

    def _admit(self) -> None:
        """Give waiting sequences slots, reusing cached prefixes: round the client requests, the oldest sequence
        of the request with the fewest running first; one whose request has none running takes a slot from a
        request that holds two more (see :mod:`engine.backends.fair_share`)."""
        while self._waiting:
            seq = next_admitted(self._waiting, self._running)
            free = self.slots.free()
            if not free:
                victim = preemption_victim(seq, self._running, pausable=self._pausable)
                if victim is None:
                    return
                free = [self._pause(victim)]
            self._waiting.remove(seq)
            if not seq.paused:  # one going on after a pause counts its prompt once
                self.stats_requests += 1
                self.stats_prompt_tokens += len(seq.prompt)
            self.slots.place(seq, free)
            seq.admitted_step = self._steps
            self._running.append(seq)

    @staticmethod
    def _pausable(seq: Sequence) -> bool:
        # A prompt with pictures keeps them as chunks that only its own slot's KV holds: it is never paused.
        return (
            seq.status is SeqStatus.DECODE and not seq.cancelled and seq.pending is not None
            and not isinstance(seq.prompt, MediaPrompt)
        )  # fmt: skip

    def _pause(self, seq: Sequence) -> Slot:
        """Take ``seq``'s slot and queue it to go on later: its prompt becomes everything it has so far (its
        slot's tokens and the token it feeds next), computed again when it comes back (its shared beginning
        copied from a sibling's slot where one holds it), and its sampler and stream carry on as they were."""
        slot = seq.placed
        seq.prompt = [*slot.tokens, seq.next_token]
        seq.pending = None
        seq.n_past = 0
        seq.sample_debt = 0.0
        seq.status = SeqStatus.WAITING
        seq.paused = True
        seq.slot = None
        slot.seq = None
        slot.last_used = time.monotonic()
        self._running.remove(seq)
        self._waiting.appendleft(seq)
        self.stats_paused += 1
        return slot

    def _decode(self, items: list[Row]) -> None:
        """One ``llama_decode`` call over ``(token, position, seq_id, wants_logits)`` items."""
        fill_batch(self.batch, items)
        rc = llama_cpp.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _step(self) -> None:
        """Prefill waiting prompts within the budget, then decode one token of every running sequence.

        A prompt whose last block is computed in this step samples its first token there and
        decodes its second in the same step's batch, so the batch never lacks a row (nor breaks the
        run of slots, see below) for a prompt that has just come in.

        Prompts are prefilled in blocks that start at multiples of ``prefill_block`` and run
        in calls of their own, so a prompt's numbers never depend on what else is running,
        and each decode row is computed on its own. (A cached prefix is reused to the exact token,
        so what follows it may be computed in a shorter first block than on a cold start.) With
        flash attention on several threads,
        llama.cpp splits a lone sequence's attention differently from a batch's once contexts
        pass 256 tokens, which can flip a rare greedy token there; below that a request gets
        the same tokens in a batch as alone.
        """
        self._prefill()
        plan = self._schedule()
        if plan is None:
            return
        seconds = self._decode_rows(plan)
        self._prefill_credit = min(0.0, self._prefill_credit + seconds * PREFILL_SHARE)
        self._postprocess(plan, seconds)

    def _prefill(self) -> None:
        """Compute prompt blocks (and at most one picture) of the prefilling sequences, within the step's budget;
        a prompt computed to its end samples its first token."""
        budget = self.prefill_chunk
        block = self.prefill_block
        media_done = False  # one picture a step: the others' decodes never wait on more than one encode
        # A step's prompt tokens stay within the budget, so that the running streams' next tokens never wait on more:
        # a block that would pass it waits for the next step (the step's first block always goes; blocks are never
        # cut to fit, see _step). The prompt with the least left to compute goes first (fair_share.prompt_order): a
        # short question that comes while a long document is read gets its first token at once, not after the
        # document's last block.
        prefilling = [s for s in self._running if s.status is SeqStatus.PREFILL]
        # Streams that decode wait on this step's blocks: a prompt with more than a block left takes its share of
        # the time (PREFILL_SHARE), and a prompt that ends within a block (a chat's new question) goes at once.
        waited_on = any(s.status is SeqStatus.DECODE for s in self._running)
        if not waited_on:
            self._prefill_credit = max(self._prefill_credit, -self._last_block)
        for seq in sorted(prefilling, key=lambda s: prompt_order(self._steps, s.admitted_step, len(s.prompt) - s.n_past)):
            if seq.copy_from is not None and not self.slots.prefix_ready(seq, seq.copy_from):
                continue
            media = seq.media
            while budget > 0 and seq.status is SeqStatus.PREFILL and not seq.cancelled:
                start = seq.n_past
                if waited_on and self._prefill_credit < 0 and len(seq.prompt) - start > block:
                    break
                t0 = time.perf_counter()
                if start in media:
                    if media_done:
                        break
                    media_done = True
                    budget -= media[start].n_tokens
                    self._prefill_media(seq, media[start])
                    self._charge(time.perf_counter() - t0)
                    continue
                end = min(len(seq.prompt), (start // block + 1) * block, *(s for s in media if s > start))
                scored = seq.stream.prompt_logprobs is not None
                if scored:  # every row's logits: a row costs the model's output layer too, so a few rows a step
                    end = min(end, start + SCORED_ROWS)
                if budget < self.prefill_chunk and (end - start > budget or scored):
                    return
                last = end == len(seq.prompt)
                slot = seq.placed
                p0 = seq.pos(start)  # a text block never holds a picture: its positions run on from the first
                if scored:
                    self._prefill_scored(seq, start, end, p0)
                else:
                    self._decode([(seq.prompt[i], p0 + i - start, slot.seq_id, last and i == end - 1) for i in range(start, end)])
                slot.tokens.extend(seq.prompt[start:end])
                seq.n_past = end
                self._charge(time.perf_counter() - t0)
                budget -= self.prefill_chunk if scored else end - start
                if last:
                    seq.status = SeqStatus.DECODE
                    self._advance(seq, end - start - 1)
            if budget <= 0:
                break

    def _charge(self, seconds: float) -> None:
        """A prompt block (or picture) took ``seconds``: the decoding streams are owed them (PREFILL_SHARE)."""
        self._last_block = seconds
        self._prefill_credit -= seconds

    def _prefill_scored(self, seq: Sequence, start: int, end: int, p0: int) -> None:
        """Compute prompt tokens ``start`` to ``end`` with every row's logits, each token's log-probability
        taken from the row before it."""
        scores = seq.stream.prompt_logprobs
        assert scores is not None
        prompt = seq.prompt
        self._decode([(prompt[i], p0 + i - start, seq.placed.seq_id, True) for i in range(start, end)])
        for i in range(start, min(end, len(prompt) - 1)):
            scores.append(seq.sampler.logprobs(self.ctx, i - start, prompt[i + 1], n_top=seq.params.prompt_logprobs))

    def _schedule(self) -> StepPlan | None:
        """This step's decode rows: a row of each decoding sequence that owes no sampling time (one sequence of each
        request, see :mod:`engine.backends.fair_share`), followed by the tokens it drafts; None when none decodes."""
        # In slot order: llama.cpp computes a batch over separate KV streams in ubatches of consecutive sequence
        # ids, as they come in the batch, so rows in admission order would cost a graph (a read of every
        # weight) for each break in it, and in slot order cost one for each run of busy slots.
        ready = sorted((s for s in self._running if s.status is SeqStatus.DECODE), key=lambda s: s.placed.seq_id)
        decoding = [s for s in ready if s.sample_debt <= 0] or ready
        if not decoding:
            return None
        self._steps += 1
        decoding = one_row_per_request(decoding, lambda s: s.last_step)
        for s in decoding:
            s.last_step = self._steps
        # Each row's pending token, followed by the tokens its request drafts (engine.backends.speculative):
        # one batch verifies them all, a sequence's rows in a run.
        plan = StepPlan(ready, decoding)
        rows = plan.rows
        room = min(self.n_batch, DRAFT_BATCH_ROWS) - len(decoding)
        for s in decoding:
            draft = self._draft(s, room)
            room -= len(draft)
            plan.drafts.append((s, len(rows), draft))
            seq_id = s.placed.seq_id
            pos = s.pos(s.n_past)
            rows.append((s.next_token, pos, seq_id, True))
            rows.extend((d, pos + 1 + j, seq_id, True) for j, d in enumerate(draft))
        return plan

    def _decode_rows(self, plan: StepPlan) -> float:
        """Decode the step's rows in one call; the seconds it took."""
        t0 = time.perf_counter()
        self._decode(plan.rows)
        seconds = time.perf_counter() - t0
        if len(plan.decoding) == 1:  # one sequence's steps: their rows are its draft, with nothing else in them
            self.row_cost.add(len(plan.rows), seconds)
        return seconds

    def _postprocess(self, plan: StepPlan, seconds: float) -> None:
        """Take each decoded sequence's next token (its drafts verified) and stream it; those that sat the step
        out repay ``seconds`` of their sampling debt, and those whose sampling took longer than it owe the rest."""
        decoding = plan.decoding
        for s in decoding:
            s.placed.tokens.append(s.next_token)
            s.n_past += 1
        for s in plan.ready:
            if s.sample_debt > 0 and s not in decoding:
                s.sample_debt = max(0.0, s.sample_debt - seconds)  # it sat this step out
        alone = len(plan.ready) == 1
        for s in decoding:  # each stream's token reaches its consumer once all are drawn (RequestStream.hold)
            s.stream.hold()
        try:
            for s, row, draft in plan.drafts:
                t1 = time.perf_counter()
                if draft:
                    self._verify(s, row, draft)
                else:
                    self._advance(s, row)
                spent = time.perf_counter() - t1
                s.sample_debt = 0.0 if alone else s.sample_debt + max(0.0, spent - seconds)
        finally:
            with delivery_batch():  # one wake-up of each reader's event loop for the whole step
                for s in decoding:
                    s.stream.release()

    def _prefill_media(self, seq: Sequence, m: MediaChunk) -> None:
        """Encode picture (or sound) ``m`` of ``seq``'s prompt and put its embeddings into the slot's KV; a
        failure ends this request only."""
        slot = seq.placed
        try:
            if self.projector is None:
                raise RuntimeError("this model was loaded without its projector")
            self.projector.encode_and_decode(
                self.ctx, m, seq_id=slot.seq_id, n_past=seq.pos(m.start), n_batch=self.media_batch
            )
        except Exception as exc:
            log.warning("request %s: %s", seq.request_id, exc)
            self.slots.rm(slot.seq_id, seq.pos(m.start), -1)
            self._finish(seq, "error", error=f"{exc}.")
            return
        slot.tokens.extend(seq.prompt[m.start : m.end])
        seq.n_past = m.end

    def _draft(self, seq: Sequence, room: int) -> list[int]:
        """What ``seq`` drafts this step: within ``room`` rows of the batch, its context and its answer's length."""
        drafter = seq.stream.drafter
        if drafter is None or room <= 0:
            return []
        limit = min(room, seq.n_ctx - seq.n_past - 2)
        if seq.params.max_tokens is not None:
            limit = min(limit, seq.params.max_tokens - len(seq.stream.generated) - 1)
        return drafter.propose(limit, self.row_cost.share)

    def _verify(self, seq: Sequence, row: int, draft: list[int]) -> None:
        """Sample ``seq``'s rows from ``row`` on, in order, keeping each drafted token while it is the one the
        sampler drew before it (or, for a drafter that judges its drafts, the one its judgement gives: speculative
        sampling from a draft model's distribution); the cells of the drafted tokens not kept are removed."""
        slot = seq.placed
        drafter = seq.stream.drafter
        if draft:
            seq.stream.verifying(len(draft))
        kept = 0
        for j in range(len(draft) + 1):
            judged = None
            if drafter is not None and j < len(draft):
                judged = drafter.judge(j, seq.sampler.logits(self.ctx, row + j))
            self._advance(seq, row + j, judged, draft[j] if j < len(draft) else None)
            if seq.status is SeqStatus.FINISHED or j == len(draft) or seq.pending != draft[j]:
                break
            slot.tokens.append(draft[j])  # its cell was computed in this step's batch
            seq.n_past += 1
            kept += 1
        if kept < len(draft):
            self.slots.rm(slot.seq_id, seq.pos(len(slot.tokens)), -1)
        if drafter is not None:
            drafter.record(len(draft), kept)
        self.stats_draft_tokens += len(draft)
        self.stats_accepted_tokens += kept

    def _advance(self, seq: Sequence, row: int, token: int | None = None, drafted: int | None = None) -> None:
        """Take ``seq``'s next token from batch row ``row``: ``token`` where it was judged already, else its
        sampler's draw; ``drafted``: the token drafted for this position, if any (kept when it is the one taken)."""
        thinking = seq.sampler.thinking
        forced = thinking.forced() if thinking is not None else None
        try:
            if forced is not None:  # the thinking budget is spent: its closing tag's next token
                token = seq.sampler.sample_forced(self.ctx, row, forced, cancelled=lambda: seq.cancelled)
            elif token is None and seq.params.holds_end(len(seq.stream.generated)):
                token = seq.sampler.sample_holding_end(self.ctx, row, cancelled=lambda: seq.cancelled)
            elif token is None:
                token = seq.sampler.sample(self.ctx, row, cancelled=lambda: seq.cancelled)
        except RequestCancelled:
            self._finish(seq, "cancelled")
            return
        except (GrammarTooSlow, GrammarDeadEnd) as exc:  # this request's grammar only: the others go on
            log.warning("request %s: %s", seq.request_id, exc)
            self._finish(seq, "error", error=str(exc), code=exc.code)
            return
        if thinking is not None:
            thinking.feed(token)
        lp: tuple[TokenLogprob, ...] = ()
        if seq.params.logprobs is not None:
            lp = (seq.sampler.logprobs(self.ctx, row, token),)
        n_before = len(seq.stream.generated)
        done = seq.stream.push(token, logprobs=lp, context_full=seq.n_past + 1 >= seq.n_ctx, kept_draft=token == drafted)
        self.stats_generated_tokens += len(seq.stream.generated) - n_before
        if done:
            self._release(seq)
        else:
            seq.pending = token

    def _finish(self, seq: Sequence, reason: FinishReason, *, error: str | None = None, code: str | None = None) -> None:
        if seq.status is not SeqStatus.FINISHED:
            self._release(seq)
            seq.stream.finish(reason, error=error, code=code)

    def _release(self, seq: Sequence) -> None:
        """Free a finished sequence's slot (its tokens stay there as a cached prefix) and sampler."""
        seq.status = SeqStatus.FINISHED
        if seq in self._running:
            self._running.remove(seq)
        if seq.slot is not None:
            seq.slot.seq = None
            seq.slot.last_used = time.monotonic()
            seq.slot = None
        self._by_id.pop(seq.request_id, None)
        seq.sampler.close()
        if isinstance(seq.prompt, MediaPrompt):
            seq.prompt.close()  # the mtmd chunks: the slot keeps the pictures' KV, under their placeholder ids
