"""Triton kernels for CUDA, and :class:`TritonOps`, the ops set that runs a model on them.

Every kernel has a plain-torch twin in ``ops.TorchOps`` / ``attention``; the tests compare the
two on random inputs under ``TRITON_INTERPRET=1``, which runs the kernels on the CPU.
"""

from __future__ import annotations

import torch

from engine.backends.paged.attention import AttentionMetadata
from engine.backends.paged.kernels.attention import paged_decode_attention, paged_prefill_attention
from engine.backends.paged.kernels.fused import rms_norm, rotary, silu_and_mul
from engine.backends.paged.kernels.kv_store import store_kv


class TritonOps:
    """The same operations as ``TorchOps``, on Triton kernels (no host syncs: CUDA-graph safe)."""

    name = "triton"
    rms_norm = staticmethod(rms_norm)
    silu_and_mul = staticmethod(silu_and_mul)
    rotary = staticmethod(rotary)

    @staticmethod
    def attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Store this step's KV, then attend. q: [tokens, heads, dim]; k, v: [tokens, kv_heads, dim]."""
        store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        nd = meta.num_decodes
        if meta.num_prefills == 0:
            return paged_decode_attention(q, k_cache, v_cache, meta.decode_block_tables, meta.decode_context_lens, scale)
        out = torch.empty_like(q)
        if nd:
            out[:nd] = paged_decode_attention(
                q[:nd], k_cache, v_cache, meta.decode_block_tables, meta.decode_context_lens, scale
            )
        # cu_query_lens are absolute rows, so the prefill kernel reads and writes the full tensors
        full = paged_prefill_attention(
            q, k_cache, v_cache, meta.prefill_block_tables, meta.prefill_cu_query_lens,
            meta.prefill_context_lens_t, meta.max_prefill_query_len, scale,
        )  # fmt: skip
        out[nd:] = full[nd:]
        return out


__all__ = ["TritonOps", "paged_decode_attention", "paged_prefill_attention", "store_kv", "rms_norm", "silu_and_mul", "rotary"]
