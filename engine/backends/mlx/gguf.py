"""Llama-family GGUF files as mlx-lm models, with Q4_0/Q4_1/Q8_0 weights kept quantized.

``mx.load`` reads a GGUF file natively: Q4_0, Q4_1 and Q8_0 tensors arrive as MLX affine
quantization (``weight``/``scales``/``biases``, groups of 32); other types arrive as 16-bit
floats. llama.cpp's converter permutes the rows of the query and key projections so that
rotary pairs sit side by side (GPT-J style); MLX's ``traditional`` RoPE rotates exactly
those pairs, so the weights load unchanged with ``rope_traditional=True``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama

from engine.errors import ModelLoadError
from engine.gguf.names import hf_name

log = logging.getLogger(__name__)

GGUF_GROUP_SIZE = 32  # every GGUF type MLX keeps quantized uses blocks of 32 weights
SUPPORTED_ARCHITECTURES = ("llama",)


def _num(meta: Mapping[str, Any], key: str, default: float | None = None) -> Any:
    value = meta.get(key)
    if value is None:
        return default
    return value.item() if hasattr(value, "item") else value


def model_args(path: Path, meta: Mapping[str, Any], weights: Mapping[str, mx.array]) -> llama.ModelArgs:
    """mlx-lm's llama arguments from GGUF metadata.

    Raises:
        ModelLoadError: the architecture or its RoPE variant is one the mlx backend cannot run.
    """
    arch = str(meta.get("general.architecture", ""))
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            str(path),
            f"the mlx backend runs GGUF files of llama-family models only, and this one is '{arch}'; "
            "use the llama.cpp backend.",
        )
    if "rope_freqs.weight" in weights:
        raise ModelLoadError(
            str(path),
            "it uses per-frequency RoPE factors (Llama 3.1 style) that the mlx backend cannot apply; use llama.cpp.",
        )
    rope_scaling = None
    scaling = str(meta.get(f"{arch}.rope.scaling.type", "none"))
    if scaling == "linear":
        rope_scaling = {"type": "linear", "factor": float(_num(meta, f"{arch}.rope.scaling.factor", 1.0))}
    elif scaling not in ("none", ""):
        raise ModelLoadError(
            str(path), f"its '{scaling}' RoPE scaling is not supported by the mlx backend; use llama.cpp."
        )
    n_embd = int(_num(meta, f"{arch}.embedding_length"))
    n_head = int(_num(meta, f"{arch}.attention.head_count"))
    head_dim = _num(meta, f"{arch}.attention.key_length") or _num(meta, f"{arch}.rope.dimension_count")
    tokens = meta.get("tokenizer.ggml.tokens") or []
    return llama.ModelArgs(
        model_type="llama",
        hidden_size=n_embd,
        num_hidden_layers=int(_num(meta, f"{arch}.block_count")),
        intermediate_size=int(_num(meta, f"{arch}.feed_forward_length")),
        num_attention_heads=n_head,
        num_key_value_heads=int(_num(meta, f"{arch}.attention.head_count_kv", n_head)),
        head_dim=int(head_dim) if head_dim else n_embd // n_head,
        rms_norm_eps=float(_num(meta, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        vocab_size=int(_num(meta, f"{arch}.vocab_size", len(tokens))),
        rope_theta=float(_num(meta, f"{arch}.rope.freq_base", 10000.0)),
        rope_traditional=True,
        rope_scaling=rope_scaling,
        max_position_embeddings=int(_num(meta, f"{arch}.context_length", 4096)),
        tie_word_embeddings="output.weight" not in weights,
    )


def build_gguf_model(
    path: Path, weights: Mapping[str, mx.array], meta: Mapping[str, Any], *, dtype: mx.Dtype
) -> tuple[nn.Module, llama.ModelArgs]:
    """An mlx-lm llama model holding the GGUF file's weights.

    Args:
        path: The file (named in errors).
        weights: The tensors ``mx.load`` read from it.
        meta: Its metadata.
        dtype: The float type for norms, scales and unquantized weights.

    Raises:
        ModelLoadError: the file's tensors do not make a model the mlx backend can run.
    """
    args = model_args(path, meta, weights)
    params: dict[str, mx.array] = {}
    for name, value in weights.items():
        target = hf_name(name)
        if target is None:
            raise ModelLoadError(
                str(path), f"it has a tensor the mlx backend does not know ({name}); use llama.cpp."
            )
        params[target] = value.astype(dtype) if mx.issubdtype(value.dtype, mx.floating) else value
    dense = [n for n in params if n.endswith(".weight") and f"{n[: -len('.weight')]}.scales" not in params]
    if any(params[n].ndim == 2 for n in dense):
        log.info("%s: tensors in types MLX cannot keep quantized were expanded to %s", path.name, dtype)

    model = llama.Model(args)

    def quantized(layer_path: str, module: nn.Module) -> bool | dict[str, int]:
        scales = params.get(f"{layer_path}.scales")
        if scales is None or not hasattr(module, "to_quantized"):
            return False
        in_features = scales.shape[-1] * GGUF_GROUP_SIZE
        bits = params[f"{layer_path}.weight"].shape[-1] * 32 // in_features
        return {"group_size": GGUF_GROUP_SIZE, "bits": bits}

    nn.quantize(model, class_predicate=quantized)
    try:
        model.load_weights(list(params.items()), strict=True)
    except ValueError as exc:
        raise ModelLoadError(str(path), f"its tensors do not fit a llama model ({exc}).") from exc
    model.eval()
    return model, args


__all__ = ["build_gguf_model", "model_args", "SUPPORTED_ARCHITECTURES"]
