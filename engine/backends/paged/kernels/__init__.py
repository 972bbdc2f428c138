"""Triton kernels for CUDA, and :class:`TritonOps`, the ops set that runs a model on them.

Every kernel has a plain-torch twin in ``ops.TorchOps`` / ``attention``; the tests compare the
two on random inputs under ``TRITON_INTERPRET=1``, which runs the kernels on the CPU, and
``compile_check`` compiles each variant the engine launches for NVIDIA GPUs.

Prefill chunks with no cached prefix go to torch's variable-length flash attention where torch
has it on the GPU (``torch.nn.attention.varlen``); chunks over a cached prefix, and every chunk
where torch has no such kernel, go to the Triton prefill kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from engine.backends.paged.attention import AttentionMetadata
from engine.backends.paged.kernels.attention import paged_decode_attention, paged_prefill_attention
from engine.backends.paged.kernels.fused import rms_norm, rotary, silu_and_mul
from engine.backends.paged.kernels.kv_store import store_kv

log = logging.getLogger(__name__)


def _load_varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


class _Varlen:
    """torch's varlen flash attention, until a call shows it cannot run here (then the Triton kernel)."""

    fn: ClassVar[Callable[..., Any] | None] = _load_varlen()

    @classmethod
    def usable(cls, q: torch.Tensor, meta: AttentionMetadata) -> bool:
        return (
            cls.fn is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and meta.prefill_context_lens == meta.prefill_query_lens  # no cached prefix: K, V are the chunk's own
        )  # fmt: skip

    @classmethod
    def attend(cls, q, k, v, meta: AttentionMetadata, scale: float) -> torch.Tensor | None:
        """Causal attention of the prefill rows ``q`` over their fresh ``k``, ``v``; None if torch refuses."""
        fn, cu_lens = cls.fn, meta.prefill_cu_query_lens
        if fn is None or cu_lens is None:
            return None
        cu = cu_lens - cu_lens[:1]
        n = meta.max_prefill_query_len
        try:
            return fn(q, k, v, cu, cu, n, n, scale=scale, window_size=(-1, 0), enable_gqa=q.shape[1] != k.shape[1])
        except (RuntimeError, TypeError, ValueError) as exc:  # no flash kernel for this GPU, dtype or head size
            log.info("torch's varlen attention cannot run here (%s); prefill uses the Triton kernel", exc)
            cls.fn = None
            return None


class TritonOps:
    """The same operations as ``TorchOps``, on Triton kernels (no host syncs: CUDA-graph safe)."""

    name: ClassVar[str] = "triton"  # class variables: the class itself is the ForwardOps
    rms_norm: ClassVar = staticmethod(rms_norm)
    silu_and_mul: ClassVar = staticmethod(silu_and_mul)
    rotary: ClassVar = staticmethod(rotary)

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
            return paged_decode_attention(q, k_cache, v_cache, *meta.decode_tables, scale)
        out = torch.empty_like(q)
        if nd:
            out[:nd] = paged_decode_attention(q[:nd], k_cache, v_cache, *meta.decode_tables, scale)
        if _Varlen.usable(q, meta):
            got = _Varlen.attend(q[nd:], k[nd:], v[nd:], meta, scale)
            if got is not None:
                out[nd:] = got
                return out
        # cu_query_lens are absolute rows, so the prefill kernel reads and writes the full tensors
        cu_query_lens, context_lens = meta.prefill_cu_query_lens, meta.prefill_context_lens_t
        if cu_query_lens is None or context_lens is None:
            raise ValueError(f"a step of {meta.num_prefills} prefills came without their query and context lengths")
        full = paged_prefill_attention(
            q, k_cache, v_cache, meta.prefill_tables, cu_query_lens, context_lens, meta.max_prefill_query_len, scale,
        )  # fmt: skip
        out[nd:] = full[nd:]
        return out


__all__ = ["TritonOps", "paged_decode_attention", "paged_prefill_attention", "store_kv", "rms_norm", "silu_and_mul", "rotary"]
