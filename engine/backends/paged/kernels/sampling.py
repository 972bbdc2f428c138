"""The batch's random draws in one Triton launch: the exponential race over counter-based noise.

Each row's noise is a hash of (its request's seed, the request's draw count, the token id), so a
seeded request draws the same tokens whatever else shares the batch, with no per-request generator
and no per-row launch. ``sampler.race_noise`` computes the same noise in torch: the tests check the
two agree token for token under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.backends.paged.kernels.launch import launch

RACE_BLOCK = 1024


@triton.jit
def _mix32(x):
    x = x ^ (x >> 16)
    x = x * 0x45D9F3B
    x = x ^ (x >> 16)
    x = x * 0x45D9F3B
    return x ^ (x >> 16)


@triton.jit
def _race_kernel(probs_ptr, keys_ptr, out_ptr, stride_p, vocab, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    hi = tl.load(keys_ptr + row * 3).to(tl.uint32)
    lo = tl.load(keys_ptr + row * 3 + 1).to(tl.uint32)
    count = tl.load(keys_ptr + row * 3 + 2).to(tl.uint32)
    s = _mix32(_mix32(_mix32(hi) ^ lo) ^ count)
    best = tl.full([BLOCK], -1.0, tl.float32)
    best_i = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(0, vocab, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < vocab
        p = tl.load(probs_ptr + row * stride_p + cols, mask=mask, other=0.0)
        h = _mix32(_mix32(s + cols.to(tl.uint32)) ^ s)
        u = ((h >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
        noise = tl.maximum(-tl.log(u), 1.1754943508222875e-38)  # sampler.NOISE_FLOOR (2**-126): u is 1 at the top hash
        score = tl.where(mask, p / noise, -1.0)
        better = score > best  # strictly: the earlier token keeps a tie, as argmax does
        best = tl.where(better, score, best)
        best_i = tl.where(better, cols, best_i)
    top = tl.max(best, axis=0)
    index = tl.min(tl.where(best == top, best_i, 2147483647), axis=0)
    tl.store(out_ptr + row, index.to(tl.int64))


def race(probs: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """probs: [rows, vocab] float32; keys: [rows, 3] int64 (seed high, seed low, draw count) -> tokens [rows]."""
    rows, vocab = probs.shape
    out = torch.empty(rows, dtype=torch.int64, device=probs.device)
    if rows:
        launch(_race_kernel, (rows,), probs, keys, out, probs.stride(0), vocab, BLOCK=RACE_BLOCK)
    return out


__all__ = ["race"]
