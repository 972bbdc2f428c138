"""One engine step: schedule -> run the model -> sample -> record. Single-threaded by design;
the backend's engine thread is its only caller."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engine.backends.base import BackendStats
from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.model_runner import ModelRunner
from engine.backends.paged.sampler import RequestSampler, sample
from engine.backends.paged.scheduler import Scheduler
from engine.backends.paged.sequence import Sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepOutput:
    """A token a sequence gained this step, with its logprobs when asked for."""

    seq: Sequence
    token: int
    logprobs: tuple[float, list[int], list[float]] | None


class LLMEngine:
    """Schedules, runs and samples; sequences carry a :class:`RequestSampler` as ``seq.owner.sampler``.

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

    def add(self, seq: Sequence) -> None:
        self.scheduler.add(seq)

    def finish(self, seq: Sequence) -> None:
        """Remove ``seq`` and free its blocks now."""
        if not seq.is_finished:
            self.scheduler.finish(seq)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self) -> list[StepOutput]:
        output = self.scheduler.schedule()
        if output.is_empty:
            return []
        batch = self.runner.prepare(output.scheduled)
        logits = self.runner.run(batch)  # [num_sampled, vocab]
        sampled = [item.seq for item in batch.sampled]
        result = sample(
            logits, [s.owner.sampler for s in sampled], [(s.token_ids, s.num_prompt_tokens) for s in sampled]
        )
        self.scheduler.postprocess(output, {s.seq_id: t for s, t in zip(sampled, result.tokens, strict=True)})
        self.num_steps += 1
        self.num_batched_tokens += output.num_batched_tokens
        return [StepOutput(s, t, lp) for s, t, lp in zip(sampled, result.tokens, result.logprobs, strict=True)]

    def stats(self, *, waiting: int = 0, requests: int = 0, prompt_tokens: int = 0, generated_tokens: int = 0) -> BackendStats:
        """The engine's figures; the caller adds what it counts itself (requests queued before the engine)."""
        bm = self.block_manager
        return BackendStats(
            running=len(self.scheduler.running), waiting=len(self.scheduler.waiting) + waiting,
            slots=self.config.max_num_seqs, n_ctx_per_sequence=self.config.max_model_len,
            requests=requests, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens,
            prefix_cache_tokens=bm.num_hit_tokens,
            details={
                "blocks_total": bm.num_blocks, "blocks_used": bm.num_used_blocks, "blocks_cached": bm.num_cached_blocks,
                "block_size": bm.block_size, "preemptions": self.scheduler.num_preemptions, "steps": self.num_steps,
            },
        )  # fmt: skip


__all__ = ["LLMEngine", "StepOutput", "RequestSampler"]
