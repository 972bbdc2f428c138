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
    x_ptr, positions, cos_sin, stride_xt, stride_xh, stride_cs, half, BLOCK: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    head = tl.program_id(1)
    pos = tl.load(positions + token)
    i = tl.arange(0, BLOCK)
    mask = i < half
    cos = tl.load(cos_sin + pos * stride_cs + i, mask=mask, other=0.0)
    sin = tl.load(cos_sin + pos * stride_cs + half + i, mask=mask, other=0.0)
    base = x_ptr + token * stride_xt + head * stride_xh
    x1 = tl.load(base + i, mask=mask, other=0.0)
    x2 = tl.load(base + half + i, mask=mask, other=0.0)
    cos = cos.to(x1.dtype)
    sin = sin.to(x1.dtype)
    tl.store(base + i, x1 * cos - x2 * sin, mask=mask)
    tl.store(base + half + i, x2 * cos + x1 * sin, mask=mask)


def rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE in place. q: [tokens, heads, dim], k: [tokens, kv_heads, dim] (rows may be strided)."""
    half = q.shape[-1] // 2
    for x in (q, k):
        if x.shape[0]:
            launch(
                _rotary_kernel, (x.shape[0], x.shape[1]),
                x, positions, cos_sin, x.stride(0), x.stride(1), cos_sin.stride(0), half,
                BLOCK=triton.next_power_of_2(half),
            )  # fmt: skip
    return q, k


__all__ = ["rms_norm", "silu_and_mul", "rotary"]
