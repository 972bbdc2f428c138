"""How many KV blocks fit: measured after the weights are loaded and one warm-up step has run."""

from __future__ import annotations

import logging

import psutil
import torch

from engine.backends.paged.config import EngineConfig
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence import Sequence
from engine.types import SamplingParams

log = logging.getLogger(__name__)

# On the CPU the cache shares RAM with everything else: take at most this share of what is free.
CPU_DEFAULT_FRACTION = 0.25
# ... and at most this much unless num_kv_blocks says otherwise (vLLM's CPU backend defaults to 4 GiB too).
CPU_DEFAULT_CAP_BYTES = 4 << 30


def warm_up(runner, config: EngineConfig) -> None:
    """Run one full-budget prefill step (on a scratch cache) so peak activation memory is known."""
    n = min(config.max_num_batched_tokens, config.max_model_len)
    blocks = -(-n // config.block_size)
    runner.allocate_kv_cache(blocks)
    seq = Sequence([0] * n, SamplingParams(temperature=0), block_size=config.block_size)
    seq.block_table = list(range(blocks))
    runner.run(runner.prepare([ScheduledSeq(seq, n)]))
    runner.kv_caches = []


GPU_DEFAULT_FRACTION = 0.9


def num_kv_blocks(runner, config: EngineConfig) -> int:
    """Blocks for the KV cache: ``config.num_kv_blocks`` if set, else what fits in free memory.

    On CUDA: the free device memory after loading and warm-up, times the fraction, less the
    warm-up's peak activations. On the CPU: the available RAM times the fraction, at most 4 GiB.
    Either way no more than ``max_num_seqs`` full-length sequences could use (4x that on a GPU,
    where spare blocks serve the prefix cache).
    """
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    per_block = runner.bytes_per_block
    cap = config.max_num_seqs * config.max_blocks_per_seq
    if runner.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(runner.device)
        before = torch.cuda.memory_allocated(runner.device)
        warm_up(runner, config)
        torch.cuda.synchronize(runner.device)
        peak = torch.cuda.max_memory_allocated(runner.device) - before
        torch.cuda.empty_cache()
        free, _total = torch.cuda.mem_get_info(runner.device)
        budget = free * (config.kv_cache_fraction or GPU_DEFAULT_FRACTION) - peak
        cap = max(cap, 4 * cap)  # on a GPU, spare blocks serve the prefix cache
    else:
        warm_up(runner, config)
        budget = psutil.virtual_memory().available * (config.kv_cache_fraction or CPU_DEFAULT_FRACTION)
        budget = min(budget, CPU_DEFAULT_CAP_BYTES)
    blocks = min(cap, int(budget // per_block))
    log.info("KV cache: %d blocks of %d tokens (%.1f MiB)", blocks, config.block_size, blocks * per_block / 2**20)
    return blocks


__all__ = ["num_kv_blocks", "warm_up", "CPU_DEFAULT_FRACTION", "GPU_DEFAULT_FRACTION"]
