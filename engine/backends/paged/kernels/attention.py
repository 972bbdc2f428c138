"""Triton paged attention: decode (one query per sequence) and prefill chunks over paged KV.

Both read keys and values straight from the block-paged cache through the block tables, with
an online softmax in float32. The cache may be float8 (e4m3); loads upcast it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_kernel(
    q_ptr, k_cache, v_cache, block_tables, context_lens, out_ptr, scale,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt, stride_ot, stride_oh,
    GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP
    ctx = tl.load(context_lens + seq)
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    q = tl.load(q_ptr + seq * stride_qt + head * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
    offs = tl.arange(0, BLOCK_SIZE)
    m_i = tl.zeros([BLOCK_SIZE], dtype=tl.float32) - float("inf")  # running max, kept per lane
    l_i = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for i in range(0, tl.cdiv(ctx, BLOCK_SIZE)):
        block = tl.load(block_tables + seq * stride_bt + i).to(tl.int64)
        pos = i * BLOCK_SIZE + offs
        valid = pos < ctx
        base = block * stride_cb + offs[:, None] * stride_cs + kv_head * stride_ch + d[None, :]
        kvmask = valid[:, None] & dmask[None, :]
        k = tl.load(k_cache + base, mask=kvmask, other=0.0).to(tl.float32)  # [BLOCK_SIZE, BLOCK_D]
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(tl.max(m_i, axis=0), tl.max(s, axis=0))
        alpha = tl.exp(tl.max(m_i, axis=0) - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(v_cache + base, mask=kvmask, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha
        l_i = l_i + p
        m_i = tl.zeros([BLOCK_SIZE], dtype=tl.float32) + m_new
    total = tl.sum(l_i, axis=0)
    out = acc / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + seq * stride_ot + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=dmask)


def paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, scale: float,
) -> torch.Tensor:  # fmt: skip
    """q: [batch, heads, head_dim]; caches: [blocks, block_size, kv_heads, head_dim] -> [batch, heads, head_dim]."""
    batch, heads, dim = q.shape
    out = torch.empty_like(q)
    if batch == 0:
        return out
    _decode_kernel[(batch, heads)](
        q, k_cache, v_cache, block_tables, context_lens, out, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=heads // k_cache.shape[2], BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=dim,
        BLOCK_D=triton.next_power_of_2(dim),
    )  # fmt: skip
    return out


@triton.jit
def _prefill_kernel(
    q_ptr, k_cache, v_cache, block_tables, cu_query_lens, context_lens, out_ptr, scale,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt, stride_ot, stride_oh,
    GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    tile = tl.program_id(2)
    kv_head = head // GROUP
    q_start = tl.load(cu_query_lens + seq)
    q_len = tl.load(cu_query_lens + seq + 1) - q_start
    if tile * BLOCK_M >= q_len:
        return
    ctx = tl.load(context_lens + seq)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < q_len
    q_pos = ctx - q_len + rows  # each query's position in the sequence
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    q = tl.load(
        q_ptr + (q_start + rows)[:, None] * stride_qt + head * stride_qh + d[None, :],
        mask=rmask[:, None] & dmask[None, :], other=0.0,
    )  # fmt: skip  # [BLOCK_M, BLOCK_D], the model dtype: tl.dot runs on tensor cores
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    offs = tl.arange(0, BLOCK_SIZE)
    last = tl.minimum(ctx, ctx - q_len + (tile + 1) * BLOCK_M)  # keys beyond the tile's last query are masked anyway
    for i in range(0, tl.cdiv(last, BLOCK_SIZE)):
        block = tl.load(block_tables + seq * stride_bt + i).to(tl.int64)
        k_pos = i * BLOCK_SIZE + offs
        base = block * stride_cb + offs[:, None] * stride_cs + kv_head * stride_ch + d[None, :]
        kvmask = (k_pos < ctx)[:, None] & dmask[None, :]
        k = tl.load(k_cache + base, mask=kvmask, other=0.0).to(q.dtype)  # [BLOCK_SIZE, BLOCK_D]
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale  # [BLOCK_M, BLOCK_SIZE]
        allowed = (k_pos[None, :] <= q_pos[:, None]) & (k_pos < ctx)[None, :]
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        v = tl.load(v_cache + base, mask=kvmask, other=0.0).to(q.dtype)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v).to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        out_ptr + (q_start + rows)[:, None] * stride_ot + head * stride_oh + d[None, :],
        out.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & dmask[None, :],
    )  # fmt: skip


def paged_prefill_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    cu_query_lens: torch.Tensor, context_lens: torch.Tensor, max_query_len: int, scale: float,
) -> torch.Tensor:  # fmt: skip
    """Causal attention of prefill chunks over their whole paged context (cached prefix + the chunk).

    q: [tokens, heads, head_dim], rows cu_query_lens[i]..cu_query_lens[i+1] belonging to sequence i,
    whose KV (context_lens[i] tokens, the chunk's included) is already in the cache -> [tokens, heads, head_dim].
    """
    tokens, heads, dim = q.shape
    out = torch.empty_like(q)
    n_seqs = context_lens.shape[0]
    block_m = 16 if max_query_len <= 16 else 32
    grid = (n_seqs, heads, triton.cdiv(max_query_len, block_m))
    _prefill_kernel[grid](
        q, k_cache, v_cache, block_tables, cu_query_lens, context_lens, out, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=heads // k_cache.shape[2], BLOCK_SIZE=k_cache.shape[1], HEAD_DIM=dim,
        BLOCK_D=triton.next_power_of_2(dim), BLOCK_M=block_m,
    )  # fmt: skip
    return out


__all__ = ["paged_decode_attention", "paged_prefill_attention"]
