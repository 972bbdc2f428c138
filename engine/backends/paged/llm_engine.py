"""One engine step: draft -> schedule -> run the model -> sample (verifying drafts) -> record.
Single-threaded by design; the backend's engine thread is its only caller."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat

from engine.backends.base import BackendStats
from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.model_runner import ModelRunner, StepBatch
from engine.backends.paged.sampler import RequestSampler
from engine.backends.paged.scheduler import Scheduler
from engine.backends.paged.sequence import Sequence
from engine.backends.paged.sequence_rows import rows_for
from engine.backends.paged.speculation import DRAFT_ROWS_CPU, DRAFT_ROWS_GPU, Verified, propose_drafts, verify
from engine.backends.speculative import RowCost

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepOutputs:
    """The tokens the sequences gained in one step, in columns with an entry per token: a sequence that
    verified a draft has several, in order. Iterating gives each token's
    ``(seq, token, logprobs, num_tokens, drafted, kept_draft)``.

    ``num_tokens`` is the sequence's length once it holds the token; ``logprobs`` the token's
    ``(logprob, top ids, top logprobs)`` when its request asked, else None; ``drafted`` is set on a sequence's
    first token of the step, the tokens it drafted and had judged in it; ``kept_draft`` marks a drafted token
    the model agreed with. The last three columns are None when no token of the step has them (the common
    step: one token a sequence, sampled in one batch)."""

    seqs: list[Sequence]
    tokens: list[int]
    num_tokens: list[int]
    logprobs: list[tuple[float, list[int], list[float]] | None] | None = None
    drafted: list[int] | None = None
    kept_draft: list[bool] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def __iter__(self) -> Iterator[tuple[Sequence, int, tuple[float, list[int], list[float]] | None, int, int, bool]]:
        n = len(self.tokens)
        return zip(self.seqs, self.tokens, self.logprobs or repeat(None, n), self.num_tokens,
                   self.drafted or repeat(0, n), self.kept_draft or repeat(False, n), strict=True)  # fmt: skip



class LLMEngine:
    """Schedules, runs and samples; sequences carry a :class:`RequestSampler` as ``seq.owner.sampler`` and
    the :class:`~engine.backends.speculative.Drafter` of their request, or None, as ``seq.owner.drafter``.

    Args:
        runner: The model runner, its KV cache allocated with ``num_blocks`` blocks.
        config: Engine limits.
        num_blocks: Blocks in the KV cache.
    """

    def __init__(self, runner: ModelRunner, config: EngineConfig, num_blocks: int) -> None:
        self.runner = runner
        self.config = config
        self.block_manager = BlockManager(num_blocks, config.block_size, enable_prefix_caching=config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager)
        self.num_steps = 0
        self.num_batched_tokens = 0
        self.num_draft_tokens = 0  # speculative decoding: tokens drafted, and of them kept
        self.num_accepted_tokens = 0
        self.row_cost = RowCost()  # what a drafted row adds to a one-sequence step, measured
        self.draft_rows = DRAFT_ROWS_CPU if runner.device.type == "cpu" else DRAFT_ROWS_GPU

    def add(self, seq: Sequence) -> None:
        self.scheduler.add(seq)

    def finish(self, seq: Sequence) -> None:
        """Remove ``seq`` and free its blocks now."""
        if not seq.is_finished:
            self.scheduler.finish(seq)
        self.runner.release(seq)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self) -> StepOutputs:
        running = self.scheduler.running
        drafts = propose_drafts(running, rows=self.draft_rows, max_model_len=self.config.max_model_len,
                                row_cost=self.row_cost.share)  # fmt: skip
        t0 = time.perf_counter()
        output = self.scheduler.schedule(drafts)
        if output.is_empty:
            return StepOutputs([], [], [])
        batch = self.runner.prepare(output.scheduled, sample=True)
        seqs = [item.seq for item in batch.sampled]
        if batch.host_rows is not None:  # set when every sampled row takes the batched path: a token each
            tokens = self.runner.sample(batch).tolist()
            self.runner.rows.count_draws(batch.host_rows)
            if self.runner.rows.watching:
                self._watch_calls(seqs, tokens)
            verified = None
            sampled: dict[int, int | list[int]] = {s.seq_id: t for s, t in zip(seqs, tokens, strict=True)}
        else:
            verified, tokens = self._verify(batch, seqs), []
            sampled = {v.seq.seq_id: v.tokens for v in verified}
            if self.runner.rows.watching:
                self._watch_calls(seqs, None)
        if self.runner.rows.budgeted:
            self._settle_budgets(seqs)
        if len(running) == 1 and len(output.scheduled) == 1 and output.scheduled[0].num_tokens == 1:
            self.row_cost.add(output.num_batched_tokens, time.perf_counter() - t0)  # one sequence's decode
        self.scheduler.postprocess(output, sampled)
        self.num_steps += 1
        self.num_batched_tokens += output.num_batched_tokens
        if verified is None:
            return StepOutputs(seqs, tokens, [s.num_tokens for s in seqs])
        return self._columns(verified)

    def _settle_budgets(self, seqs: list[Sequence]) -> None:
        """Rows whose thinking budget can force nothing more (engine.tools.thinking_budget) go back to the batched
        path."""
        rows = self.runner.rows
        for seq in seqs:
            if seq.seq_id in rows.budgeted and not seq.owner.sampler.thinking.pending:
                rows.settle(seq)

    def _watch_calls(self, seqs: list[Sequence], tokens: list[int] | None) -> None:
        """Where a request's grammar waits for a tool call to open: show it each token sampled batched (``tokens``;
        None: the step sampled each row with its request's sampler, which did). One whose call opened samples
        with its grammar from the next step on; one whose call opened in a way the grammar cannot take, freely."""
        rows = self.runner.rows
        for i, seq in enumerate(seqs):
            if seq.seq_id not in rows.watching:
                continue
            matcher = seq.owner.sampler.matcher
            if tokens is not None:
                matcher.consume(tokens[i])
            if matcher.active:
                rows.constrain(seq)
            elif matcher.watch is None:
                rows.watching.discard(seq.seq_id)

    def _columns(self, verified: list[Verified]) -> StepOutputs:
        """The step's outputs from each sequence's verified tokens (a draft's kept tokens, then the sampled one)."""
        seqs, tokens, num_tokens, logprobs, drafted, kept = [], [], [], [], [], []
        for v in verified:
            self.num_draft_tokens += v.drafted
            self.num_accepted_tokens += v.kept
            n = len(v.tokens)
            first = v.seq.num_tokens - n
            seqs += [v.seq] * n
            tokens += v.tokens
            num_tokens += range(first + 1, first + n + 1)
            logprobs += v.logprobs
            drafted += [v.drafted] + [0] * (n - 1)
            kept += [i < v.kept for i in range(n)]
        return StepOutputs(seqs, tokens, num_tokens, logprobs if any(x is not None for x in logprobs) else None,
                           drafted if any(drafted) else None, kept if any(kept) else None)  # fmt: skip

    def _verify(self, batch: StepBatch, seqs: list[Sequence]) -> list[Verified]:
        """Each sampling sequence's tokens, each row with its request's sampler, drafts verified; the draw
        counts the batched path keeps go to the samplers and back."""
        rows = self.runner.rows
        table_rows = rows_for(rows, seqs)
        rows.sync_draws_to(seqs, table_rows)
        verified = verify(batch.sampled, self.runner.run(batch))
        rows.sync_draws_from(seqs, table_rows)
        return verified

    def stats(self, *, waiting: int = 0, requests: int = 0, prompt_tokens: int = 0, generated_tokens: int = 0) -> BackendStats:
        """The engine's figures; the caller adds what it counts itself (requests queued before the engine)."""
        bm = self.block_manager
        return BackendStats(
            running=len(self.scheduler.running), waiting=len(self.scheduler.waiting) + waiting,
            slots=self.config.max_num_seqs, n_ctx_per_sequence=self.config.max_model_len,
            max_waiting=self.config.max_waiting,
            requests=requests, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens,
            prefix_cache_tokens=bm.num_hit_tokens,
            details={
                "blocks_total": bm.num_blocks, "blocks_used": bm.num_used_blocks, "blocks_cached": bm.num_cached_blocks,
                "block_size": bm.block_size, "preemptions": self.scheduler.num_preemptions, "steps": self.num_steps,
                "draft_tokens": self.num_draft_tokens, "accepted_draft_tokens": self.num_accepted_tokens,
            },
        )  # fmt: skip


__all__ = ["LLMEngine", "RequestSampler", "StepOutputs"]
