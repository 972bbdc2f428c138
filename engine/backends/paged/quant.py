"""Quantized linear layers: FP8 (e4m3, per-output-channel scales), int8 weight-only, and int4
weight-only in groups (the CPU's fast path).

On CUDA with compute capability >= 8.9 (Ada, Hopper) FP8 layers run ``torch._scaled_mm`` with
activations quantized per token on the fly; elsewhere ``fp8`` falls back to int8 weight-only.
On the CPU both are emulated exactly as they compute (FP8: activations and weights rounded to
e4m3 and back), which is what the tests compare against full precision.

``int4`` stores each group of 32 input weights as 4-bit codes with a scale and an offset, the
layout of GGUF's Q4_1: a model read from a Q4_1 GGUF file keeps exactly the values the file holds,
at an eighth of the float32 bytes a decode step has to read. It runs on torch's packed int4 CPU
matmul, which is fast with bfloat16 activations (the engine's CPU dtype when int4 is chosen).
"""

from __future__ import annotations

import logging
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from engine.backends.paged.models.llama import Linear

log = logging.getLogger(__name__)

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
INT4_GROUP = 32


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: w [out, in] -> (q int8 [out, in], scale float32 [out])."""
    scale = (w.abs().amax(dim=1).float() / 127.0).clamp(min=1e-12)
    q = torch.round(w.float() / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel e4m3: w [out, in] -> (q float8 [out, in], scale float32 [out])."""
    scale = (w.abs().amax(dim=1).float() / FP8_MAX).clamp(min=1e-12)
    return (w.float() / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def quantize_int4(w: torch.Tensor, group: int = INT4_GROUP) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit groups: w [out, in] -> (codes uint8 [out, in] in 0..15, scale, offset [out, in / group]).

    ``w ~= (code - 8) * scale + offset`` for each group of ``group`` input weights, torch's int4
    convention. The codes span each group's minimum to maximum in 15 steps, as GGUF Q4_1 does, so a
    tensor dequantized from Q4_1 comes back to its own codes.
    """
    out, inp = w.shape
    g = w.float().reshape(out, inp // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15.0).clamp(min=torch.finfo(torch.float32).tiny)
    codes = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.uint8)
    return codes.reshape(out, inp), scale, lo + 8.0 * scale


def int4_supported(linear: Linear, group: int = INT4_GROUP) -> bool:
    """torch's packed int4 layout needs whole groups along the input and outputs in multiples of 16."""
    out, inp = linear.weight.shape
    return inp % group == 0 and out % 16 == 0


def quantize_per_token_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [tokens, in] -> (e4m3 [tokens, in], scale float32 [tokens, 1]), dynamic per row."""
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


class Int8Linear(nn.Module):
    """Weight-only int8: y = (x @ q^T) * scale + b; the per-row scale factors out of the matmul."""

    def __init__(self, linear: Linear) -> None:
        super().__init__()
        q, scale = quantize_int8(linear.weight.data)
        self.weight = nn.Parameter(q, requires_grad=False)
        self.weight_scale = nn.Parameter(scale, requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight.to(x.dtype)) * self.weight_scale.to(x.dtype)
        return y + self.bias if self.bias is not None else y


class FP8Linear(nn.Module):
    """e4m3 weights with per-channel scales, activations quantized per token at run time."""

    def __init__(self, linear: Linear) -> None:
        super().__init__()
        q, scale = quantize_fp8(linear.weight.data)
        self.weight = nn.Parameter(q, requires_grad=False)
        self.weight_scale = nn.Parameter(scale, requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, xs = quantize_per_token_fp8(x2)
        if x.is_cuda:
            out_dtype = torch.bfloat16 if x.dtype == torch.float32 else x.dtype
            y = torch._scaled_mm(  # pyright: ignore[reportPrivateImportUsage]  (torch's FP8 matmul is only private)
                xq, self.weight.t(), scale_a=xs, scale_b=self.weight_scale[None, :], out_dtype=out_dtype
            ).to(x.dtype)
        else:  # emulate the same arithmetic: e4m3 operands, float accumulation, both scales after
            y = F.linear(xq.to(x.dtype), self.weight.to(x.dtype)) * (xs.to(x.dtype) * self.weight_scale.to(x.dtype))
        y = y.reshape(*shape[:-1], -1)
        return y + self.bias if self.bias is not None else y


class Int4Linear(nn.Module):
    """Weight-only int4 in groups, on torch's packed int4 CPU matmul.

    ``weight``: the codes packed two to a byte in the kernel's layout [out, in / 2];
    ``weight_scales_zeros``: [in / group, out, 2] scale and offset per group, in the activation dtype.
    """

    def __init__(self, linear: Linear, group: int = INT4_GROUP) -> None:
        super().__init__()
        codes, scale, offset = quantize_int4(linear.weight.data, group)
        self.group = group
        self.out_features = codes.shape[0]
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)
        self.weight = nn.Parameter(packed, requires_grad=False)
        scales_zeros = torch.stack([scale.t(), offset.t()], dim=-1).contiguous()
        self.weight_scales_zeros = nn.Parameter(scales_zeros, requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        sz = self.weight_scales_zeros
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.reshape(-1, shape[-1]), self.weight, self.group, sz if sz.dtype == x.dtype else sz.to(x.dtype)
        ).reshape(*shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y


def fp8_supported(device: torch.device) -> bool:
    """FP8 matmuls need compute capability 8.9 or newer; the CPU emulates them (slowly)."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device) >= (8, 9)


def scaled_mm_supported(linear: Linear) -> bool:
    """torch._scaled_mm takes matrices whose both dimensions are multiples of 16."""
    out, inp = linear.weight.shape
    return inp % 16 == 0 and out % 16 == 0


def quantize_model(model: nn.Module, method: str, *, device: torch.device) -> str:
    """Swap every decoder-layer Linear for its quantized twin; embeddings and LM head stay as they are.

    Returns the method applied: ``fp8`` becomes ``int8`` on GPUs older than compute capability 8.9,
    and ``int4`` (a CPU kernel) becomes ``int8`` on a GPU. A layer whose shape the int4 layout
    cannot hold stays in full precision; on a GPU, one whose shape ``_scaled_mm`` cannot take gets
    int8 weights instead of FP8 (one log line counts them).
    """
    if method == "fp8" and not fp8_supported(device):
        log.info("FP8 needs compute capability >= 8.9; using int8 weight-only instead")
        method = "int8"
    if method == "int4" and device.type != "cpu":
        log.info("int4 weights run on the CPU; using int8 weight-only on %s instead", device.type)
        method = "int8"
    cls = {"fp8": FP8Linear, "int8": Int8Linear, "int4": Int4Linear}[method]
    odd: list[str] = []
    # any module with ``layers`` of blocks that hold ``self_attn`` and ``mlp`` (a decoder, or a test's stand-in)
    for i, layer in enumerate(cast(nn.ModuleList, model.layers)):
        for parent in (layer.get_submodule("self_attn"), layer.get_submodule("mlp")):
            for name, child in list(parent.named_children()):
                if not isinstance(child, Linear) or (method == "int4" and not int4_supported(child)):
                    continue
                if method == "fp8" and device.type != "cpu" and not scaled_mm_supported(child):
                    odd.append(f"layers.{i}.{name}")
                    setattr(parent, name, Int8Linear(child))
                else:
                    setattr(parent, name, cls(child))
    if odd:
        log.info("%d layers (%s ...) have shapes FP8 matmuls cannot take (not multiples of 16); they use int8 weights",
                 len(odd), odd[0])  # fmt: skip
    return method


__all__ = [
    "Int8Linear", "FP8Linear", "Int4Linear", "quantize_model", "quantize_int8", "quantize_fp8", "quantize_int4",
    "fp8_supported", "int4_supported", "scaled_mm_supported",
]  # fmt: skip
