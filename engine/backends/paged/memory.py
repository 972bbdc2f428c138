"""A check of the planned KV block pool on a GPU: measured after the weights are loaded and one
warm-up step has run. The pool itself is planned by the memory model (see load_plan.py)."""

from __future__ import annotations

import logging

import torch

from engine.backends.paged.config import EngineConfig
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence import Sequence
from engine.fit.plan import PAGED_GPU_SHARE
from engine.types import SamplingParams

log = logging.getLogger(__name__)


def warm_up(runner, config: EngineConfig) -> None:
    """Run one full-budget prefill step (on a scratch cache) so peak activation memory is known."""
    n = min(config.max_num_batched_tokens, config.max_model_len)
    blocks = -(-n // config.block_size)
    runner.allocate_kv_cache(blocks)
    seq = Sequence([0] * n, SamplingParams(temperature=0), block_size=config.block_size)
    seq.block_table = list(range(blocks))
    runner.run(runner.prepare([ScheduledSeq(seq, n)]))
    runner.release(seq)
    runner.kv_caches = []


def blocks_free_on_gpu(runner, config: EngineConfig) -> int:
    """Blocks the GPU has room for now: its free memory after the weights and a warm-up step, times
    the cache's share, less the step's peak activations."""
    torch.cuda.reset_peak_memory_stats(runner.device)
    before = torch.cuda.memory_allocated(runner.device)
    warm_up(runner, config)
    torch.cuda.synchronize(runner.device)
    peak = torch.cuda.max_memory_allocated(runner.device) - before
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info(runner.device)
    budget = free * (config.kv_cache_fraction or PAGED_GPU_SHARE) - peak
    return max(0, int(budget // runner.bytes_per_block))


def checked_kv_blocks(runner, config: EngineConfig, planned: int) -> int:
    """The planned pool, or on a GPU the blocks that are free when fewer (the plan's activations or
    free memory were off; the log says by how much). Blocks that were asked for are not checked."""
    if runner.device.type != "cuda" or config.num_kv_blocks is not None:
        return planned
    room = blocks_free_on_gpu(runner, config)
    if room >= planned:
        return planned
    log.warning("the GPU has room for %d KV blocks after a warm-up step, not the %d planned (%.0f MiB less)",
                room, planned, (planned - room) * runner.bytes_per_block / 2**20)  # fmt: skip
    return room


__all__ = ["checked_kv_blocks", "blocks_free_on_gpu", "warm_up"]
