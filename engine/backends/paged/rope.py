"""Rotary position embeddings with the scalings the supported families use: linear, llama3, yarn.

The cos/sin table is computed once for every position up to the model's length; a forward
pass indexes it by each token's position. The rotation is the "rotate half" form of Hugging
Face checkpoints (GGUF Q/K weights are un-permuted to it on load).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from engine.errors import ModelLoadError

ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rope_parameters(config: Mapping[str, Any]) -> dict[str, Any]:
    """One flat dict of RoPE settings from a config's ``rope_scaling`` or ``rope_parameters`` and ``rope_theta``."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    params.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    params["rope_type"] = params.get("rope_type", params.get("type", "default")) or "default"
    return params


def inverse_frequencies(params: Mapping[str, Any], dim: int, max_position: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [dim // 2] (float32, computed as the reference models do) and the factor cos/sin are multiplied by.

    Raises:
        ModelLoadError: the scaling type is not one Hearth implements.
    """
    base = float(params["rope_theta"])
    kind = params["rope_type"]
    inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    if params.get("freq_factors") is not None:  # GGUF Llama 3.1+: scaling baked into per-frequency divisors
        inv = inv / torch.tensor(params["freq_factors"], dtype=torch.float32)
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / float(params["factor"]), 1.0
    if kind == "llama3":
        return _llama3(inv, params), 1.0
    if kind == "yarn":
        return _yarn(base, dim, params, max_position)
    raise ModelLoadError("config.json", f"RoPE scaling '{kind}' is not supported (only {', '.join(ROPE_TYPES)}).")


def _llama3(inv: torch.Tensor, p: Mapping[str, Any]) -> torch.Tensor:
    factor = float(p["factor"])
    low, high = float(p.get("low_freq_factor", 1.0)), float(p.get("high_freq_factor", 4.0))
    old_ctx = float(p.get("original_max_position_embeddings", 8192))
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_ctx / low, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return torch.where(medium, smoothed, scaled)


def _yarn(base: float, dim: int, p: Mapping[str, Any], max_position: int) -> tuple[torch.Tensor, float]:
    old_ctx = float(p.get("original_max_position_embeddings") or max_position)
    factor = p.get("factor") or max_position / old_ctx
    factor = float(factor)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor")
    if attention is None:
        m, m_all = p.get("mscale"), p.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    fast, slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old_ctx / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = correction_dim(fast), correction_dim(slow)
    if p.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
    freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * freqs)) * (1 - extrapolation) + (1.0 / freqs) * extrapolation
    return inv, float(attention)


def cos_sin_table(params: Mapping[str, Any], head_dim: int, max_position: int) -> torch.Tensor:
    """[max_position, head_dim]: the cosines of every position's angles, then their sines.

    Angles are float32, as in the reference models, so each position rounds the same way.
    """
    inv, scale = inverse_frequencies(params, head_dim, max_position)
    angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv)  # [max_position, head_dim // 2]
    return torch.cat([angles.cos() * scale, angles.sin() * scale], dim=-1)


__all__ = ["cos_sin_table", "rope_parameters", "inverse_frequencies", "ROPE_TYPES"]
