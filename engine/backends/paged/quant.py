"""Quantized linear layers: FP8 (e4m3, per-output-channel scales) and int8 weight-only.

On CUDA with compute capability >= 8.9 (Ada, Hopper) FP8 layers run ``torch._scaled_mm`` with
activations quantized per token on the fly; elsewhere ``fp8`` falls back to int8 weight-only.
On the CPU both are emulated exactly as they compute (FP8: activations and weights rounded to
e4m3 and back), which is what the tests compare against full precision.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from engine.backends.paged.models.llama import Linear

log = logging.getLogger(__name__)

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: w [out, in] -> (q int8 [out, in], scale float32 [out])."""
    scale = (w.abs().amax(dim=1).float() / 127.0).clamp(min=1e-12)
    q = torch.round(w.float() / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel e4m3: w [out, in] -> (q float8 [out, in], scale float32 [out])."""
    scale = (w.abs().amax(dim=1).float() / FP8_MAX).clamp(min=1e-12)
    return (w.float() / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


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
            y = torch._scaled_mm(
                xq, self.weight.t(), scale_a=xs, scale_b=self.weight_scale[None, :], out_dtype=out_dtype
            ).to(x.dtype)
        else:  # emulate the same arithmetic: e4m3 operands, float accumulation, both scales after
            y = F.linear(xq.to(x.dtype), self.weight.to(x.dtype)) * (xs.to(x.dtype) * self.weight_scale.to(x.dtype))
        y = y.reshape(*shape[:-1], -1)
        return y + self.bias if self.bias is not None else y


def fp8_supported(device: torch.device) -> bool:
    """FP8 matmuls need compute capability 8.9 or newer; the CPU emulates them (slowly)."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device) >= (8, 9)


def quantize_model(model: nn.Module, method: str, *, device: torch.device) -> str:
    """Swap every decoder-layer Linear for its quantized twin; embeddings and LM head stay as they are.

    Returns the method applied: ``fp8`` becomes ``int8`` on GPUs older than compute capability 8.9.
    """
    if method == "fp8" and not fp8_supported(device):
        log.info("FP8 needs compute capability >= 8.9; using int8 weight-only instead")
        method = "int8"
    cls = FP8Linear if method == "fp8" else Int8Linear
    for layer in model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, Linear):
                    setattr(parent, name, cls(child))
    return method


__all__ = ["Int8Linear", "FP8Linear", "quantize_model", "quantize_int8", "quantize_fp8", "fp8_supported"]
