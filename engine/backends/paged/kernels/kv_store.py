"""Triton KV-cache store: each token's keys and values into its slot (slot -1: skipped)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.backends.paged.kernels.launch import launch


@triton.jit
def _store_kernel(
    k_ptr, v_ptr, k_cache, v_cache, slot_mapping,
    stride_kt, stride_kh, stride_vt, stride_vh, stride_cb, stride_cs, stride_ch, block_size, head_dim,
    BLOCK_D: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_mapping + token)
    if slot < 0:  # a padding row of a CUDA-graph batch
        return
    block = slot // block_size
    offset = slot % block_size
    d = tl.arange(0, BLOCK_D)
    mask = d < head_dim
    dst = block * stride_cb + offset * stride_cs + head * stride_ch + d
    k = tl.load(k_ptr + token * stride_kt + head * stride_kh + d, mask=mask)
    v = tl.load(v_ptr + token * stride_vt + head * stride_vh + d, mask=mask)
    tl.store(k_cache + dst, k.to(k_cache.dtype.element_ty), mask=mask)
    tl.store(v_cache + dst, v.to(v_cache.dtype.element_ty), mask=mask)


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """k, v: [tokens, kv_heads, head_dim] (rows may be strided); caches: [blocks, block_size, kv_heads, head_dim]."""
    tokens, heads, dim = k.shape
    if tokens == 0:
        return
    if k.stride(2) != 1 or v.stride(2) != 1:
        k, v = k.contiguous(), v.contiguous()
    launch(
        _store_kernel, (tokens, heads),
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), k_cache.shape[1], dim,
        BLOCK_D=max(16, triton.next_power_of_2(dim)),
    )  # fmt: skip


__all__ = ["store_kv"]
