"""Triton paged attention: split-KV decode (one query per sequence) and prefill chunks over paged KV.

Both read keys and values straight from the block-paged cache through the block tables, an online
softmax in float32. Keys are taken in tiles of ``BLOCK_N`` positions whatever the cache's block size
(each position looks up its own block), so every ``tl.dot`` has a reduction of at least 16, which
NVIDIA's tensor cores need. Block size, group size and head size are run-time numbers: one compiled
kernel serves every model of a dtype and head-size class. The cache may be float8 (e4m3); loads upcast it.

Decode is flash-decoding: each program takes one KV head of one sequence for a slice of its
context and attends for all the query heads of that head's group at once (the group is the M side
of the dot), so each key and value is read once per group, not once per query head. A second
kernel merges the slices by their log-sum-exp. The number of slices depends only on the batch
size, so a captured CUDA graph stays valid as contexts grow.
"""

from __future__ import annotations

from functools import cache

import torch
import triton
import triton.language as tl

from engine.backends.paged.kernels.launch import launch

DECODE_BLOCK_N = 64  # key positions per tile in decode
PREFILL_BLOCK_N = 32  # ... and in prefill
BLOCK_G = 16  # query heads of one group per decode program: the M side of the dot (16 at least)
MAX_SPLITS = 16  # context slices per decode (sequence, KV head)
_TARGET_PROGRAMS = 264  # decode programs worth launching: about two per SM of a large GPU


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 models get float32 products (TF32 would cost about three decimal digits)
    return "ieee" if dtype == torch.float32 else "tf32"


@triton.jit
def _decode_split_kernel(
    q_ptr, k_cache, v_cache, block_tables, context_lens, part_out, part_lse, scale,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt,
    num_heads, group, block_size, head_dim, num_splits,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, MAX_SPLITS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head_tile = tl.program_id(1)  # kv_head * tiles_per_group + tile
    split = tl.program_id(2)
    tiles = tl.cdiv(group, BLOCK_G)
    kv_head = head_tile // tiles
    g = (head_tile % tiles) * BLOCK_G + tl.arange(0, BLOCK_G)
    gmask = g < group
    heads = kv_head * group + g  # [BLOCK_G] the query heads this program serves
    d = tl.arange(0, BLOCK_D)
    dmask = d < head_dim
    ctx = tl.load(context_lens + seq)
    per_split = tl.cdiv(tl.cdiv(ctx, num_splits), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, ctx)
    q = tl.load(
        q_ptr + seq * stride_qt + heads[:, None] * stride_qh + d[None, :],
        mask=gmask[:, None] & dmask[None, :], other=0.0,
    )  # fmt: skip  # [BLOCK_G, BLOCK_D]
    m_i = tl.zeros([BLOCK_G], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    n = tl.arange(0, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):
        pos = start + n
        valid = pos < hi
        block = tl.load(block_tables + seq * stride_bt + pos // block_size, mask=valid, other=0).to(tl.int64)
        base = block[:, None] * stride_cb + (pos % block_size)[:, None] * stride_cs + kv_head * stride_ch + d[None, :]
        kvmask = valid[:, None] & dmask[None, :]
        k = tl.load(k_cache + base, mask=kvmask, other=0.0).to(q.dtype)  # [BLOCK_N, BLOCK_D]
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # [BLOCK_G, BLOCK_N]
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        v = tl.load(v_cache + base, mask=kvmask, other=0.0).to(q.dtype)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v, input_precision=DOT_PRECISION)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    lse = tl.where(l_i > 0, m_i + tl.log(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
    row = (seq * num_heads + heads) * MAX_SPLITS + split  # [BLOCK_G]
    tl.store(part_out + row[:, None] * BLOCK_D + d[None, :], out, mask=gmask[:, None])
    tl.store(part_lse + row, lse, mask=gmask)


@triton.jit
def _decode_merge_kernel(
    part_out, part_lse, out_ptr, stride_ot, stride_oh, num_heads, head_dim, num_splits,
    BLOCK_D: tl.constexpr, MAX_SPLITS: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, MAX_SPLITS)
    d = tl.arange(0, BLOCK_D)
    row = (seq * num_heads + head) * MAX_SPLITS + s
    lse = tl.load(part_lse + row, mask=s < num_splits, other=float("-inf"))
    m = tl.max(lse, axis=0)
    w = tl.exp(lse - tl.where(m == float("-inf"), 0.0, m))  # an empty slice weighs 0
    parts = tl.load(part_out + row[:, None] * BLOCK_D + d[None, :], mask=(s < num_splits)[:, None], other=0.0)
    total = tl.sum(w, axis=0)
    out = tl.sum(w[:, None] * parts, axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + seq * stride_ot + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d < head_dim)


@cache
def _programs_wanted(device_index: int) -> int:
    return 2 * torch.cuda.get_device_properties(device_index).multi_processor_count


def decode_splits(batch: int, num_kv_heads: int, group: int, device: torch.device) -> int:
    """Context slices per (sequence, KV head): enough programs to fill the GPU, a power of two, 1..16.

    Depends on the batch size only (with the model's shape), so a CUDA graph captured for a batch size
    keeps its launch shape as contexts grow.
    """
    target = _TARGET_PROGRAMS
    if device.type == "cuda":
        target = _programs_wanted(device.index if device.index is not None else torch.cuda.current_device())
    programs = batch * num_kv_heads * -(-group // BLOCK_G)
    splits = 1
    while splits < MAX_SPLITS and programs * splits < target:
        splits *= 2
    return splits


def paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, scale: float, num_splits: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """q: [batch, heads, head_dim]; caches: [blocks, block_size, kv_heads, head_dim] -> [batch, heads, head_dim]."""
    batch, heads, dim = q.shape
    out = torch.empty_like(q)
    if batch == 0:
        return out
    n_kv = k_cache.shape[2]
    group = heads // n_kv
    splits = num_splits or decode_splits(batch, n_kv, group, q.device)
    block_d = max(16, int(triton.next_power_of_2(dim)))
    part_out = torch.empty(batch, heads, MAX_SPLITS, block_d, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(batch, heads, MAX_SPLITS, dtype=torch.float32, device=q.device)
    launch(
        _decode_split_kernel, (batch, n_kv * -(-group // BLOCK_G), splits),
        q, k_cache, v_cache, block_tables, context_lens, part_out, part_lse, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        heads, group, k_cache.shape[1], dim, splits,
        BLOCK_G=BLOCK_G, BLOCK_D=block_d, BLOCK_N=DECODE_BLOCK_N, MAX_SPLITS=MAX_SPLITS,
        DOT_PRECISION=_dot_precision(q.dtype),
    )  # fmt: skip
    launch(
        _decode_merge_kernel, (batch, heads),
        part_out, part_lse, out, out.stride(0), out.stride(1), heads, dim, splits,
        BLOCK_D=block_d, MAX_SPLITS=MAX_SPLITS,
    )  # fmt: skip
    return out


@triton.jit
def _prefill_kernel(
    q_ptr, k_cache, v_cache, block_tables, cu_query_lens, context_lens, out_ptr, scale,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt, stride_ot, stride_oh,
    group, block_size, head_dim,
    BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    head = tl.program_id(1)
    tile = tl.program_id(2)
    kv_head = head // group
    q_start = tl.load(cu_query_lens + seq)
    q_len = tl.load(cu_query_lens + seq + 1) - q_start
    if tile * BLOCK_M >= q_len:
        return
    ctx = tl.load(context_lens + seq)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < q_len
    q_pos = ctx - q_len + rows  # each query's position in the sequence
    d = tl.arange(0, BLOCK_D)
    dmask = d < head_dim
    q = tl.load(
        q_ptr + (q_start + rows)[:, None] * stride_qt + head * stride_qh + d[None, :],
        mask=rmask[:, None] & dmask[None, :], other=0.0,
    )  # fmt: skip  # [BLOCK_M, BLOCK_D], the model dtype: tl.dot runs on tensor cores
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    n = tl.arange(0, BLOCK_N)
    last = tl.minimum(ctx, ctx - q_len + (tile + 1) * BLOCK_M)  # keys beyond the tile's last query are masked anyway
    for start in range(0, last, BLOCK_N):
        k_pos = start + n
        valid = k_pos < last
        block = tl.load(block_tables + seq * stride_bt + k_pos // block_size, mask=valid, other=0).to(tl.int64)
        base = block[:, None] * stride_cb + (k_pos % block_size)[:, None] * stride_cs + kv_head * stride_ch + d[None, :]
        kvmask = valid[:, None] & dmask[None, :]
        k = tl.load(k_cache + base, mask=kvmask, other=0.0).to(q.dtype)  # [BLOCK_N, BLOCK_D]
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # [BLOCK_M, BLOCK_N]
        allowed = (k_pos[None, :] <= q_pos[:, None]) & valid[None, :]
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        v = tl.load(v_cache + base, mask=kvmask, other=0.0).to(q.dtype)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v, input_precision=DOT_PRECISION)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        out_ptr + (q_start + rows)[:, None] * stride_ot + head * stride_oh + d[None, :],
        out.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & dmask[None, :],
    )  # fmt: skip


def prefill_block_m(max_query_len: int) -> int:
    """Query rows per prefill program: 16 for short chunks, 64 for long ones."""
    return 16 if max_query_len <= 16 else 64


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
    block_m = prefill_block_m(max_query_len)
    grid = (n_seqs, heads, int(triton.cdiv(max_query_len, block_m)))
    launch(
        _prefill_kernel, grid,
        q, k_cache, v_cache, block_tables, cu_query_lens, context_lens, out, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        heads // k_cache.shape[2], k_cache.shape[1], dim,
        BLOCK_D=max(16, triton.next_power_of_2(dim)), BLOCK_M=block_m, BLOCK_N=PREFILL_BLOCK_N,
        DOT_PRECISION=_dot_precision(q.dtype),
    )  # fmt: skip
    return out


__all__ = ["paged_decode_attention", "paged_prefill_attention", "decode_splits", "prefill_block_m", "MAX_SPLITS"]
