"""A model's shape, as far as memory is concerned: layers, KV heads, head size, context, parameters.

Read from the best source available: a local GGUF header or config.json, the first bytes of a
remote GGUF file (:func:`read_gguf_kv` parses a header from a stream and stops before the
vocabulary, see :mod:`engine.catalog.gguf_header`), a repo's config.json, and, when nothing else is known, a guess from the parameter
count (itself from the hub, the repo name, or the file size and bits per weight).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine.catalog.metadata import ModelMetadata


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What sizes a model's KV cache. ``source`` says where the numbers came from, in words."""

    layers: int
    kv_heads: int
    head_dim: int
    context_length: int | None = None
    parameters: int | None = None
    architecture: str | None = None
    source: str = "estimated"
    # What sizes llama.cpp's compute buffers (None where the source does not say)
    embedding: int | None = None
    heads: int | None = None
    vocab: int | None = None
    feed_forward: int | None = None
    # An MoE model's experts per layer and each one's feed-forward size (None: a dense model, or not said)
    experts: int | None = None
    expert_feed_forward: int | None = None
    experts_used: int | None = None  # experts each token runs through (what a decoded token reads of them)

    def kv_bytes_per_token(self, kv_dtype_bytes: float = 2.0) -> int:
        """Keys and values of one token across every layer (f16 cache: 2 bytes per element)."""
        return int(self.layers * self.kv_heads * self.head_dim * 2 * kv_dtype_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "context_length": self.context_length,
            "parameters": self.parameters,
            "architecture": self.architecture,
            "source": self.source,
            "embedding": self.embedding,
            "heads": self.heads,
            "vocab": self.vocab,
            "feed_forward": self.feed_forward,
            "experts": self.experts,
            "expert_feed_forward": self.expert_feed_forward,
            "experts_used": self.experts_used,
        }


def shape_from_metadata(meta: ModelMetadata, source: str = "the model's own header") -> ModelShape | None:
    """The shape from locally read metadata, or None when a number is missing."""
    if not (meta.layers and meta.kv_heads and meta.head_dim):
        return None
    return ModelShape(
        layers=int(meta.layers),
        kv_heads=int(meta.kv_heads),
        head_dim=int(meta.head_dim),
        context_length=meta.context_length,
        parameters=meta.parameters,
        architecture=meta.architecture,
        source=source,
    )


def shape_from_config(config: dict[str, Any], source: str = "the repo's config.json") -> ModelShape | None:
    """The shape from a Hugging Face config.json (``text_config`` of multimodal models too)."""
    config = config.get("text_config") or config
    layers = config.get("num_hidden_layers") or config.get("n_layer") or config.get("num_layers")
    heads = config.get("num_attention_heads") or config.get("n_head")
    if not layers or not heads:
        return None
    kv_heads = config.get("num_key_value_heads") or heads
    hidden = config.get("hidden_size") or config.get("n_embd")
    head_dim = config.get("head_dim") or (hidden // heads if hidden else None)
    if not head_dim:
        return None
    return ModelShape(
        layers=int(layers),
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        context_length=config.get("max_position_embeddings"),
        architecture=config.get("model_type"),
        source=source,
        embedding=hidden,
        heads=int(heads),
        vocab=config.get("vocab_size"),
        feed_forward=config.get("intermediate_size"),
        experts=config.get("num_experts") or config.get("num_local_experts"),
        expert_feed_forward=config.get("moe_intermediate_size") or (
            config.get("intermediate_size") if config.get("num_local_experts") else None),  # Mixtral's experts are full-size
        experts_used=config.get("num_experts_per_tok"),
    )  # fmt: skip


def shape_from_gguf_kv(kv: dict[str, Any], source: str = "the GGUF header") -> ModelShape | None:
    """The shape from GGUF key/values (as :func:`read_gguf_kv` returns them)."""
    arch = kv.get("general.architecture")
    if not isinstance(arch, str):
        return None
    layers = kv.get(f"{arch}.block_count")
    heads = kv.get(f"{arch}.attention.head_count")
    kv_heads = kv.get(f"{arch}.attention.head_count_kv") or heads
    embd = kv.get(f"{arch}.embedding_length")
    head_dim = kv.get(f"{arch}.attention.key_length") or (embd // heads if embd and heads else None)
    if isinstance(kv_heads, list):  # per-layer head counts (some hybrid models): the largest sizes the cache
        kv_heads = max(kv_heads)
    if not (layers and kv_heads and head_dim):
        return None
    return ModelShape(
        layers=int(layers),
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        context_length=kv.get(f"{arch}.context_length"),
        architecture=arch,
        source=source,
        embedding=embd,
        heads=max(heads) if isinstance(heads, list) else heads,
        vocab=kv.get(f"{arch}.vocab_size"),
        feed_forward=_largest(kv.get(f"{arch}.feed_forward_length")),
        experts=kv.get(f"{arch}.expert_count"),
        expert_feed_forward=kv.get(f"{arch}.expert_feed_forward_length") or (
            _largest(kv.get(f"{arch}.feed_forward_length")) if kv.get(f"{arch}.expert_count") else None),
        experts_used=kv.get(f"{arch}.expert_used_count"),
    )  # fmt: skip


def _largest(value: Any) -> Any:
    return max(value) if isinstance(value, list) and value else value


# Typical shapes of decoder models by size (Llama/Qwen/SmolLM families), for guesses only.
_TYPICAL = (
    (0.2e9, 30, 3, 64),
    (0.6e9, 24, 2, 64),
    (1.5e9, 16, 8, 64),
    (4.5e9, 28, 8, 128),
    (10e9, 32, 8, 128),
    (16e9, 40, 8, 128),
    (40e9, 64, 8, 128),
    (90e9, 80, 8, 128),
    (float("inf"), 126, 8, 128),
)


def estimate_shape(parameters: int, *, context_length: int | None = None) -> ModelShape:
    """A typical shape for a model with ``parameters`` weights (a guess, and says so)."""
    for limit, layers, kv_heads, head_dim in _TYPICAL:
        if parameters <= limit:
            return ModelShape(
                layers=layers,
                kv_heads=kv_heads,
                head_dim=head_dim,
                context_length=context_length,
                parameters=parameters,
                source="a guess from the parameter count",
            )
    raise ValueError("unreachable: the last size class is unbounded")


_PARAMS = re.compile(r"(?:^|[-_./])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?=$|[-_./])", re.IGNORECASE)


def parameters_from_name(name: str) -> int | None:
    """Parameters from a name like ``Llama-3.1-8B``, ``SmolLM2-135M``, ``Mixtral-8x7B``; None if absent."""
    best = None
    for m in _PARAMS.finditer(name):
        experts = int(m.group(1) or 1)
        value = float(m.group(2)) * (1e9 if m.group(3).lower() == "b" else 1e6) * experts
        best = int(value)
    return best


__all__ = [
    "ModelShape",
    "shape_from_metadata",
    "shape_from_config",
    "shape_from_gguf_kv",
    "estimate_shape",
    "parameters_from_name",
]
