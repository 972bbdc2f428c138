"""Engine configuration: how the paged engine sizes its batches and its KV cache.

Plain data, no torch: the block manager and the scheduler read it in unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from engine.backends.options import LoadOptions, PagedOptions
from engine.errors import InvalidRequest
from engine.fit.plan import PAGED_STEP_TOKENS, paged_step_tokens

KV_CACHE_DTYPES = ("auto", "fp8")
QUANTIZATIONS = (None, "int8", "fp8", "int4")
ATTENTION_BACKENDS = ("auto", "torch", "triton")


DEFAULT_MAX_WAITING = 256
DEFAULT_STEP_TOKENS = PAGED_STEP_TOKENS  # a step's budget unless a load asks (engine.fit.plan.paged_step_tokens)


@dataclass(frozen=True, slots=True)
class EngineConfig(PagedOptions):
    """How the engine batches, caches and runs: the paged options, and the sizes a load settles.

    Attributes:
        max_num_seqs: Most sequences in one step.
        max_num_batched_tokens: Token budget of one step (decodes plus prefill chunks).
        max_model_len: Longest sequence (prompt plus output), the context window.
        kv_cache_dtype: ``auto`` (the model dtype) or ``fp8`` (e4m3).
        max_waiting: Most requests waiting beyond the ``max_num_seqs`` running before new ones are refused.
    """

    max_num_seqs: int = 32
    max_num_batched_tokens: int = DEFAULT_STEP_TOKENS  # with more slots, twice the slots (from_options)
    max_model_len: int = 4096
    kv_cache_dtype: str = "auto"
    max_waiting: int = DEFAULT_MAX_WAITING

    def __post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "max_waiting"):
            value = getattr(self, name)
            least = 0 if name == "max_waiting" else 1  # 0: only what runs at once is taken
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InvalidRequest(f"'{name}' must be a whole number of at least {least}, got {value!r}.", param=name)
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
    def from_options(cls, options: LoadOptions) -> EngineConfig:
        """The config ``options`` ask for: its paged options, with the slots, step budget, KV cache type and
        queue bound it sets (the context is settled at load, against the model and the cache).

        Raises:
            InvalidRequest: the KV cache type is not one this engine has, or an option is out of range.
        """
        sizes: dict[str, Any] = {}
        if options.n_seq_max:
            sizes["max_num_seqs"] = options.n_seq_max
        sizes["max_num_batched_tokens"] = options.n_batch or paged_step_tokens(options.n_seq_max)
        if options.max_waiting is not None:
            sizes["max_waiting"] = options.max_waiting
        elif options.n_seq_max:
            sizes["max_waiting"] = max(DEFAULT_MAX_WAITING, options.n_seq_max)
        if options.kv_type not in (None, "f16", "fp8"):  # fp8 is this engine's 8-bit cache, f16 its model dtype
            raise InvalidRequest("The paged engine's KV cache can be f16 or fp8; use one of those.", param="kv_type")
        if options.kv_type == "fp8":
            sizes["kv_cache_dtype"] = "fp8"
        paged = {f.name: getattr(options.paged, f.name) for f in fields(PagedOptions)}
        return cls(**paged, **sizes)


__all__ = ["DEFAULT_STEP_TOKENS", "EngineConfig", "KV_CACHE_DTYPES", "QUANTIZATIONS", "ATTENTION_BACKENDS"]
