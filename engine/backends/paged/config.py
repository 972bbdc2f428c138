"""Engine configuration: how the paged engine sizes its batches and its KV cache.

Plain data, no torch: the block manager and the scheduler read it in unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidRequest

KV_CACHE_DTYPES = ("auto", "fp8")
QUANTIZATIONS = (None, "int8", "fp8", "int4")
ATTENTION_BACKENDS = ("auto", "torch", "triton")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the engine batches, caches and runs.

    Attributes:
        block_size: Tokens per KV-cache block.
        max_num_seqs: Most sequences in one step.
        max_num_batched_tokens: Token budget of one step (decodes plus prefill chunks).
        max_model_len: Longest sequence (prompt plus output), the context window.
        num_kv_blocks: Blocks to allocate; None sizes the cache from free memory.
        kv_cache_fraction: Share of the memory free after weights and warm-up the cache may take
            (None: 0.9 of GPU memory, 0.25 of available RAM).
        enable_prefix_caching: Share KV blocks between prompts that start the same way.
        device: ``cuda`` or ``cpu``; None picks CUDA when present.
        dtype: Weight/activation dtype name (``float32``, ``bfloat16``, ``float16``, ``float64``); None picks.
        kv_cache_dtype: ``auto`` (the model dtype) or ``fp8`` (e4m3).
        quantization: None, ``int8`` (weight-only), ``fp8`` (e4m3, per-channel scales) or ``int4``
            (weight-only in groups of 32, as GGUF Q4_1; the CPU's fast path, bfloat16 activations).
        attention_backend: ``torch`` (reference), ``triton`` (kernels) or ``auto``.
        cuda_graph_batch_sizes: Decode batch sizes captured as CUDA graphs.
        enforce_eager: Never capture CUDA graphs.
        max_waiting: Most requests queued before new ones are refused.
    """

    block_size: int = 16
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    max_model_len: int = 4096
    num_kv_blocks: int | None = None
    kv_cache_fraction: float | None = None
    enable_prefix_caching: bool = True
    device: str | None = None
    dtype: str | None = None
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    attention_backend: str = "auto"
    cuda_graph_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    enforce_eager: bool = False
    max_waiting: int = 256

    def __post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "max_waiting"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidRequest(f"'{name}' must be a whole number of at least 1, got {value!r}.", param=name)
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise InvalidRequest("'num_kv_blocks' must be at least 2.", param="num_kv_blocks")
        if self.kv_cache_fraction is not None and not 0.0 < self.kv_cache_fraction <= 1.0:
            raise InvalidRequest("'kv_cache_fraction' must be above 0 and at most 1.", param="kv_cache_fraction")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise InvalidRequest(f"'kv_cache_dtype' must be one of {', '.join(KV_CACHE_DTYPES)}.", param="kv_cache_dtype")
        if self.quantization not in QUANTIZATIONS:
            raise InvalidRequest("'quantization' must be none, int8, fp8 or int4.", param="quantization")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise InvalidRequest(
                f"'attention_backend' must be one of {', '.join(ATTENTION_BACKENDS)}.", param="attention_backend"
            )
        object.__setattr__(self, "cuda_graph_batch_sizes", tuple(sorted(set(self.cuda_graph_batch_sizes))))

    @property
    def max_blocks_per_seq(self) -> int:
        return -(-self.max_model_len // self.block_size)

    @classmethod
    def from_options(cls, extra: dict[str, Any], **base: Any) -> EngineConfig:
        """A config from ``LoadOptions.extra`` (unknown keys are refused) over ``base`` values.

        Raises:
            InvalidRequest: an option is unknown or out of range.
        """
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(extra) - known - {"prefill_chunk"})
        if unknown:
            raise InvalidRequest(f"Unknown paged-engine option(s): {', '.join(unknown)}.", param="extra")
        values = dict(base)
        values.update({k: v for k, v in extra.items() if k in known})
        if "prefill_chunk" in extra and "max_num_batched_tokens" not in extra:
            values["max_num_batched_tokens"] = int(extra["prefill_chunk"])
        if isinstance(values.get("cuda_graph_batch_sizes"), list):
            values["cuda_graph_batch_sizes"] = tuple(values["cuda_graph_batch_sizes"])
        return cls(**values)


__all__ = ["EngineConfig", "KV_CACHE_DTYPES", "QUANTIZATIONS", "ATTENTION_BACKENDS"]
