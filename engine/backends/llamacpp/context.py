"""The llama.cpp context a model's decode loop computes in: every slot's KV cache and the compute buffers."""

from __future__ import annotations

import llama_cpp

from engine.backends.llamacpp.model import GGUFModel
from engine.backends.llamacpp.overrides import RopeScaling


def decode_context(
    model: GGUFModel,
    *,
    n_ctx_seq: int,
    n_seq_max: int,
    n_batch: int,
    n_outputs: int,
    n_threads: int,
    flash_attn: bool = True,
    kv_unified: bool = False,
    kv_type: int = llama_cpp.GGML_TYPE_F16,
    rope: RopeScaling | None = None,
) -> llama_cpp.llama_context_p:
    """A context of ``n_seq_max`` sequences of ``n_ctx_seq`` tokens each, for batches of ``n_batch`` tokens
    (llama.cpp's micro-batch too) with at most ``n_outputs`` rows of logits.

    Raises:
        MemoryError: llama.cpp could not create it.
    """
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx_seq * n_seq_max
    params.n_batch = n_batch
    params.n_ubatch = n_batch
    params.n_outputs_max = n_outputs
    params.n_seq_max = n_seq_max
    params.kv_unified = kv_unified
    params.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.type_k = kv_type  # a quantized V cache needs flash attention (llama.cpp refuses it otherwise)
    params.type_v = kv_type
    params.n_threads = n_threads
    params.n_threads_batch = n_threads
    params.no_perf = True
    if rope is not None:
        rope.apply(params)
    ctx = llama_cpp.llama_init_from_model(model.model_ptr, params)
    if not ctx:
        raise MemoryError(f"llama.cpp could not create a context of {params.n_ctx} tokens")
    return ctx


__all__ = ["decode_context"]
