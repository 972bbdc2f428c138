"""Triton KV-cache store: each token's keys and values into its slot (slot -1: skipped)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kernel(
    k_ptr, v_ptr, k_cache, v_cache, slot_mapping,
    stride_kt, stride_vt, stride_cb, stride_cs,
    BLOCK_SIZE: tl.constexpr, WIDTH: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    slot = tl.load(slot_mapping + token)
    if slot < 0:  # a padding row of a CUDA-graph batch
        return
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    w = tl.arange(0, BLOCK_W)
    mask = w < WIDTH
    dst = block * stride_cb + offset * stride_cs + w
    k = tl.load(k_ptr + token * stride_kt + w, mask=mask)
    v = tl.load(v_ptr + token * stride_vt + w, mask=mask)
    tl.store(k_cache + dst, k.to(k_cache.dtype.element_ty), mask=mask)
    tl.store(v_cache + dst, v.to(v_cache.dtype.element_ty), mask=mask)


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """k, v: [tokens, kv_heads, head_dim] (rows may be strided); caches: [blocks, block_size, kv_heads, head_dim]."""
    tokens, heads, dim = k.shape
    if tokens == 0:
        return
    if k.stride(2) != 1 or k.stride(1) != dim or v.stride(2) != 1 or v.stride(1) != dim:
        k, v = k.contiguous(), v.contiguous()
    width = heads * dim
    _store_kernel[(tokens,)](
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), v.stride(0), k_cache.stride(0), k_cache.stride(1),
        BLOCK_SIZE=k_cache.shape[1], WIDTH=width, BLOCK_W=triton.next_power_of_2(width),
    )  # fmt: skip


__all__ = ["store_kv"]
