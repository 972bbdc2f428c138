"""The memory model: bytes of weights, KV cache, compute buffers and runtime for one load.

Figures marked *measured* come from `benchmarks/fit_accuracy.py` runs on the starter model and
on random-weight Llama- and Qwen-shaped GGUF files (see docs/fit.md); the others follow from the
architecture: a token's KV cache is ``layers x KV heads x head size x 2 (keys, values)`` elements
of the cache type, and a sequence slot holds ``context`` tokens of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.fit.facts import ModelFacts

MIB = 1024**2

# Bytes per cached element. q8_0 and q4_0 are llama.cpp's blocks of 32 (34 and 18 bytes);
# fp8 is the paged engine's e4m3 cache.
KV_TYPES: dict[str, float] = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "fp8": 1.0}
LLAMACPP_KV_TYPES = ("f16", "q8_0", "q4_0")
PAGED_KV_TYPES = ("f16", "fp8")
KV_TYPE_WORDS = {"f16": "16-bit", "q8_0": "8-bit", "q4_0": "4-bit", "fp8": "8-bit (FP8)"}

# The worker process before any model: Python, FastAPI, uvicorn, llama.cpp's library (measured).
WORKER_RUNTIME_BYTES = 110 * MIB
# llama.cpp's own bookkeeping per loaded model beyond its buffers: the vocabulary, ggml contexts,
# per-token strings (measured: grows with the vocabulary).
LLAMACPP_BYTES_PER_VOCAB_ENTRY = 220
LLAMACPP_MODEL_BASE_BYTES = 8 * MIB
# The CUDA context and cuBLAS workspace on each NVIDIA GPU used (llama.cpp's usual figure).
CUDA_CONTEXT_BYTES = 400 * MIB
# Compute buffers (measured: see docs/fit.md). ggml reuses memory between graph nodes, so the
# buffer is the peak: for decoder models the logits of the micro-batch plus two residual rows.

def kv_type_bytes(kv_type: str) -> float:
    """Bytes per element of ``kv_type``.

    Raises:
        ValueError: the type is not one Hearth knows.
    """
    try:
        return KV_TYPES[kv_type]
    except KeyError:
        raise ValueError(f"Unknown KV cache type '{kv_type}'; use one of {', '.join(KV_TYPES)}.") from None


def kv_bytes_per_token(facts: ModelFacts, kv_type: str = "f16", *, layers: int | None = None) -> int:
    """KV-cache bytes of one token over ``layers`` (every layer when None)."""
    n = facts.layers if layers is None else layers
    return int(n * facts.shape.kv_heads * facts.shape.head_dim * 2 * kv_type_bytes(kv_type))


def kv_cache_bytes(facts: ModelFacts, *, n_ctx: int, n_seq: int = 1, kv_type: str = "f16", layers: int | None = None) -> int:
    """The KV cache of ``n_seq`` slots of ``n_ctx`` tokens each."""
    return kv_bytes_per_token(facts, kv_type, layers=layers) * int(n_ctx) * int(n_seq)


def compute_buffer_bytes(facts: ModelFacts, *, n_ubatch: int, n_ctx: int, flash_attn: bool = True) -> int:
    """llama.cpp's compute buffer for micro-batches of ``n_ubatch`` tokens over ``n_ctx`` cached tokens.

    Measured on three shapes (SmolLM2-135M, Qwen2.5-0.5B, Llama-3.2-1B): with flash attention it is
    the f32 logits of a micro-batch plus two rows of the residual stream per token, or the
    feed-forward activations where those are larger; it grows with the micro-batch, not the context.
    Without flash attention the scores of every head against every cached token (f32) are the peak
    once the context is long.
    """
    per_token = max(facts.vocab, 3 * facts.feed_forward) + 2 * facts.embedding
    if not flash_attn:
        per_token = max(per_token, n_ctx * facts.heads + 10 * facts.embedding)
    return int(4 * n_ubatch * per_token)


def output_buffer_bytes(facts: ModelFacts, *, n_outputs: int) -> int:
    """The logits llama.cpp keeps for up to ``n_outputs`` tokens of a batch (f32 per vocabulary entry)."""
    return int(4 * facts.vocab * n_outputs)


def llamacpp_model_bytes(facts: ModelFacts) -> int:
    """llama.cpp's bookkeeping for one loaded model besides weights and buffers."""
    return int(LLAMACPP_MODEL_BASE_BYTES + LLAMACPP_BYTES_PER_VOCAB_ENTRY * facts.vocab)


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes one load takes, by what takes them."""

    weights: int
    kv_cache: int
    buffers: int  # compute and output buffers
    runtime: int  # the worker process, llama.cpp's bookkeeping, CUDA contexts

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.buffers + self.runtime

    def __add__(self, other: MemoryBreakdown) -> MemoryBreakdown:
        return MemoryBreakdown(
            self.weights + other.weights,
            self.kv_cache + other.kv_cache,
            self.buffers + other.buffers,
            self.runtime + other.runtime,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights,
            "kv_cache_bytes": self.kv_cache,
            "buffers_bytes": self.buffers,
            "runtime_bytes": self.runtime,
            "total_bytes": self.total,
        }


ZERO = MemoryBreakdown(0, 0, 0, 0)

__all__ = [
    "KV_TYPES",
    "LLAMACPP_KV_TYPES",
    "PAGED_KV_TYPES",
    "KV_TYPE_WORDS",
    "WORKER_RUNTIME_BYTES",
    "CUDA_CONTEXT_BYTES",
    "MemoryBreakdown",
    "kv_type_bytes",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "compute_buffer_bytes",
    "output_buffer_bytes",
    "llamacpp_model_bytes",
]
