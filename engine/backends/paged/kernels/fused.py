"""Triton element-wise fusions: RMSNorm with the residual add, SiLU-and-multiply, rotary embedding."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.backends.paged.kernels.launch import launch

RMS_BLOCK = 1024  # widest tile of a norm row; longer rows take several


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, eps, stride_x, stride_r, stride_o, stride_ro, n,
    BLOCK_N: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
        if HAS_RESIDUAL:
            x = x + tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
            tl.store(res_out_ptr + row * stride_ro + cols, x, mask=mask)
        xf = x.to(tl.float32)
        sq += xf * xf
    rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / n + eps)
    for start in range(0, n, BLOCK_N):  # the sum first, then the scaling: x is read again (from L2)
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
        if HAS_RESIDUAL:
            x = x + tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        y = (x.to(tl.float32) * rstd).to(x.dtype) * w  # normalised in float32, scaled in the model dtype
        tl.store(out_ptr + row * stride_o + cols, y, mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(x + residual) * weight, x + residual); x, residual: [rows, n]."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, n = x.shape
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else x
    res = residual if residual is not None else x
    if rows:
        launch(
            _rms_norm_kernel, (rows,),
            x, res, weight, out, res_out, eps, x.stride(0), res.stride(0), out.stride(0), res_out.stride(0), n,
            BLOCK_N=min(RMS_BLOCK, triton.next_power_of_2(n)), HAS_RESIDUAL=residual is not None,
        )  # fmt: skip
    return out, res_out


@triton.jit
def _silu_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + n + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x: [rows, 2 * n] (gate, then up) -> silu(gate) * up: [rows, n]."""
    rows, two_n = x.shape
    n = two_n // 2
    out = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(n))
    if rows:
        launch(_silu_mul_kernel, (rows, int(triton.cdiv(n, block))), x, out, x.stride(0), out.stride(0), n, BLOCK=block)
    return out


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, positions, cos_sin, qw_ptr, kw_ptr, eps, stride_qt, stride_qh, stride_kt, stride_kh, stride_cs,
    num_q_heads, half, BLOCK: tl.constexpr, HAS_NORM: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    head = tl.program_id(1)  # the query heads, then the key heads: one launch for both
    pos = tl.load(positions + token)
    i = tl.arange(0, BLOCK)
    mask = i < half
    if head < num_q_heads:
        base = q_ptr + token * stride_qt + head * stride_qh
        w_ptr = qw_ptr
    else:
        base = k_ptr + token * stride_kt + (head - num_q_heads) * stride_kh
        w_ptr = kw_ptr
    x1 = tl.load(base + i, mask=mask, other=0.0)
    x2 = tl.load(base + half + i, mask=mask, other=0.0)
    if HAS_NORM:  # Qwen3: RMSNorm of the head first, as ``rms_norm`` rounds it (float32, then the model dtype)
        f1 = x1.to(tl.float32)
        f2 = x2.to(tl.float32)
        rstd = 1.0 / tl.sqrt((tl.sum(f1 * f1, axis=0) + tl.sum(f2 * f2, axis=0)) / (2 * half) + eps)
        x1 = (f1 * rstd).to(x1.dtype) * tl.load(w_ptr + i, mask=mask, other=0.0)
        x2 = (f2 * rstd).to(x2.dtype) * tl.load(w_ptr + half + i, mask=mask, other=0.0)
    cos = tl.load(cos_sin + pos * stride_cs + i, mask=mask, other=0.0).to(x1.dtype)
    sin = tl.load(cos_sin + pos * stride_cs + half + i, mask=mask, other=0.0).to(x1.dtype)
    tl.store(base + i, x1 * cos - x2 * sin, mask=mask)
    tl.store(base + half + i, x2 * cos + x1 * sin, mask=mask)


def rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor,
    q_norm: torch.Tensor | None = None, k_norm: torch.Tensor | None = None, eps: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Rotate-half RoPE in place, after each head's RMSNorm when ``q_norm`` and ``k_norm`` are given (Qwen3), in
    one launch for the queries and the keys. q: [tokens, heads, dim], k: [tokens, kv_heads, dim] (rows may be
    strided)."""
    tokens, heads, dim = q.shape
    norm = q_norm is not None and k_norm is not None
    if tokens:
        launch(
            _rotary_kernel, (tokens, heads + k.shape[1]),
            q, k, positions, cos_sin, q_norm if norm else q, k_norm if norm else k, eps,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos_sin.stride(0), heads, dim // 2,
            BLOCK=triton.next_power_of_2(dim // 2), HAS_NORM=norm,
        )  # fmt: skip
    return q, k


__all__ = ["rms_norm", "silu_and_mul", "rotary"]
