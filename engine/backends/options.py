"""How to load a model: the settings every backend reads, and each backend's own, typed.

Plain data, no heavy imports: the CLI builds these before it knows which backend a model gets, so a
:class:`LoadOptions` carries every backend's part and each backend reads its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.backends.speculative import SpeculativeOptions


@dataclass(frozen=True, slots=True)
class LlamaCppOptions:
    """The llama.cpp backend's own settings.

    Attributes:
        prefill_chunk: Most prompt tokens decoded in one step beside the running sequences' next tokens.
        flash_attn: Use flash attention (a quantized KV cache needs it).
        kv_unified: One KV buffer shared by every slot instead of one per slot (a prefix copy moves no data).
        memory_budget: Bytes of RAM the load plan may use (tests, small machines); None: what the machine has
            free now, GPUs included.
        grammar_mask_budget: Seconds one step may spend masking a request's vocabulary with its grammar
            before that request ends with an error (the others go on).
        rope_scale: YaRN RoPE scaling factor (a context longer than the trained one); None: the file's own.
        rope_orig_ctx: The trained context YaRN scales from; None: the file's.
        cpu_moe: MoE expert tensors kept in CPU memory while the rest goes to the GPU (llama.cpp's tensor
            buffer overrides): those of the first N layers, -1 for every layer's; None: none.
    """

    prefill_chunk: int = 256
    flash_attn: bool = True
    kv_unified: bool = False
    memory_budget: int | None = None
    grammar_mask_budget: float = 0.5
    rope_scale: float | None = None
    rope_orig_ctx: int | None = None
    cpu_moe: int | None = None


@dataclass(frozen=True, slots=True)
class PagedOptions:
    """The paged engine's own settings (its step budget, slots and context come from :class:`LoadOptions`).

    Attributes:
        block_size: Tokens per KV-cache block.
        num_kv_blocks: Blocks to allocate; None sizes the cache from free memory.
        kv_cache_fraction: Share of the memory free after weights and warm-up the cache may take
            (None: 0.9 of GPU memory, 0.25 of available RAM).
        enable_prefix_caching: Share KV blocks between prompts that start the same way.
        device: ``cuda`` or ``cpu``; None picks CUDA when present.
        dtype: Weight/activation dtype name (``float32``, ``bfloat16``, ``float16``, ``float64``); None picks.
        quantization: None, ``int8`` (weight-only), ``fp8`` (e4m3, per-channel scales) or ``int4``
            (weight-only in groups of 32, as GGUF Q4_1; the CPU's fast path, bfloat16 activations).
        attention_backend: ``torch`` (reference), ``triton`` (kernels) or ``auto``.
        cuda_graph_batch_sizes: Decode batch sizes captured as CUDA graphs.
        enforce_eager: Never capture CUDA graphs.
    """

    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_fraction: float | None = None
    enable_prefix_caching: bool = True
    device: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    attention_backend: str = "auto"
    cuda_graph_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    enforce_eager: bool = False


@dataclass(frozen=True, slots=True)
class MLXOptions:
    """The MLX backend's own settings.

    Attributes:
        prefill_chunk: Most prompt tokens computed between two cancellation checks; None: 64 on the CPU,
            512 on Metal.
    """

    prefill_chunk: int | None = None


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How to load a model. None means "choose for this machine" (or the backend's default).

    Attributes:
        n_ctx: Context length of each sequence.
        n_threads: CPU threads.
        n_gpu_layers: Layers offloaded to the GPU; None: as many as fit (llama.cpp built with GPU support).
        n_seq_max: Sequences generated at once.
        n_batch: The paged engine's token budget per step (decodes plus prefill chunks); on llama.cpp, the
            most prompt tokens computed in one call (its n_batch and n_ubatch).
        embedding: Load for embeddings.
        kv_type: KV cache type: ``f16``, ``q8_0`` or ``q4_0`` on llama.cpp, ``f16`` or ``fp8`` on the paged
            engine; None: 16-bit, or what fits.
        max_waiting: Requests waiting beyond the ``n_seq_max`` decoded at once before new ones are refused; None:
            64 (the paged engine: 256) or ``n_seq_max``, whichever is more.
        speculative: Speculative decoding (prompt lookup) for the backends whose loop verifies drafts.
        llamacpp: The llama.cpp backend's own settings.
        paged: The paged engine's own settings.
        mlx: The MLX backend's own settings.
    """

    n_ctx: int | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    n_seq_max: int | None = None
    n_batch: int | None = None
    embedding: bool = False
    kv_type: str | None = None
    max_waiting: int | None = None
    speculative: SpeculativeOptions = field(default_factory=SpeculativeOptions)
    llamacpp: LlamaCppOptions = field(default_factory=LlamaCppOptions)
    paged: PagedOptions = field(default_factory=PagedOptions)
    mlx: MLXOptions = field(default_factory=MLXOptions)


__all__ = ["LoadOptions", "LlamaCppOptions", "PagedOptions", "MLXOptions", "SpeculativeOptions"]
