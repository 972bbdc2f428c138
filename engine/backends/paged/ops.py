"""The per-layer operations a model's forward pass calls, in two interchangeable sets.

:class:`TorchOps` is the plain-torch reference (and the CPU path); ``kernels.TritonOps``
implements the same methods with fused Triton kernels. A model never knows which it got:
the set travels in the :class:`ForwardContext` handed to ``Model.forward``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
import torch.nn.functional as F

from engine.backends.paged import attention
from engine.backends.paged.attention import AttentionMetadata


class ForwardOps(Protocol):
    """The operations a forward pass calls; :class:`TorchOps` and ``kernels.TritonOps`` provide them.

    Both are classes of static methods, used as they are: ``ops.rms_norm(x, weight, eps)``.
    """

    name: str

    def rms_norm(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None, /
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def silu_and_mul(self, x: torch.Tensor, /) -> torch.Tensor: ...

    def rotary(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        cos_sin: torch.Tensor,
        q_norm: torch.Tensor | None = None,
        k_norm: torch.Tensor | None = None,
        eps: float = 0.0,
        /,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        /,
    ) -> torch.Tensor: ...


class TorchOps:
    """Reference implementations, numerically the same as the Hugging Face models."""

    name: ClassVar[str] = "torch"  # a class variable: the class itself is the ForwardOps

    @staticmethod
    def rms_norm(
        x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual); x: [tokens, hidden]. Normalised in float32."""
        if residual is not None:
            x = x + residual
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(x.dtype), x

    @staticmethod
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        """x: [tokens, 2 * inter] (gate then up) -> [tokens, inter]."""
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def rotary(
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        cos_sin: torch.Tensor,
        q_norm: torch.Tensor | None = None,
        k_norm: torch.Tensor | None = None,
        eps: float = 0.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate-half RoPE, after each head's RMSNorm when ``q_norm`` and ``k_norm`` are given (Qwen3);
        q: [tokens, heads, dim], k: [tokens, kv_heads, dim], cos_sin: [max_pos, dim]."""
        if q_norm is not None and k_norm is not None:
            t, dim = q.shape[0], q.shape[-1]
            q = TorchOps.rms_norm(q.reshape(-1, dim), q_norm, eps)[0].view(t, -1, dim)
            k = TorchOps.rms_norm(k.reshape(-1, dim), k_norm, eps)[0].view(t, -1, dim)
        cos, sin = cos_sin.index_select(0, positions).to(q.dtype).unsqueeze(1).chunk(2, dim=-1)

        def rot(x: torch.Tensor) -> torch.Tensor:
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

        return rot(q), rot(k)

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
        attention.store_kv(k, v, k_cache, v_cache, meta.slot_mapping, meta.has_padding)
        nd = meta.num_decodes
        if meta.num_prefills == 0:
            return attention.decode_attention(
                q, k_cache, v_cache, *meta.decode_tables, scale, meta.max_decode_context_len or None,
            )  # fmt: skip
        out = torch.empty_like(q)
        if nd:
            out[:nd] = attention.decode_attention(
                q[:nd], k_cache, v_cache, *meta.decode_tables, scale, meta.max_decode_context_len or None,
            )  # fmt: skip
        out[nd:] = attention.prefill_attention(q[nd:], k[nd:], v[nd:], k_cache, v_cache, meta, scale)
        return out


@dataclass(slots=True)
class ForwardContext:
    """Everything a forward pass needs besides tokens and positions."""

    meta: AttentionMetadata
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (k_cache, v_cache)
    ops: ForwardOps = TorchOps


__all__ = ["ForwardOps", "TorchOps", "ForwardContext"]
