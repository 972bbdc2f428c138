"""The Llama family (Llama 2/3.x, SmolLM2, Mistral), and the decoder the Qwen families share.

One screen per forward pass, after gpt-fast. Q, K and V are one matmul (``qkv_proj``), gate and
up another (``gate_up_proj``); ``load_weights`` packs the checkpoint's separate tensors into them.
The operations (norms, rotary, attention) come from the ``ForwardContext``, so the same model
runs the plain-torch reference or the Triton kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from engine.backends.paged.ops import ForwardContext
from engine.backends.paged.rope import cos_sin_table, rope_parameters


@dataclass(frozen=True, slots=True)
class ModelArgs:
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    vocab_size: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = None
    rope: dict[str, Any] = field(default_factory=dict)
    qk_norm: bool = False  # Qwen3
    qkv_bias: bool = False  # Qwen2: biases on Q, K, V but not on the output projection

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> ModelArgs:
        """Args from a Hugging Face config dict; keys this family does not use are ignored."""
        names = {f.name for f in dataclasses.fields(cls)} - {"rope"}
        values = {k: v for k, v in config.items() if k in names}
        values["rope"] = rope_parameters(config)
        if "use_sliding_window" in names and not config.get("use_sliding_window"):
            values["sliding_window"] = None  # Qwen2's and Qwen3's configs carry a window they use only when this is set
        return cls(**values)

    @property
    def n_kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


class Linear(nn.Module):
    """y = x W^T (+ b); ``quant.quantize_model`` swaps it for a quantized twin."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.dim = args.num_attention_heads, args.n_kv_heads, args.dim_head
        self.scale = self.dim**-0.5
        self.eps = args.rms_norm_eps
        q, kv = self.n_heads * self.dim, self.n_kv * self.dim
        self.qkv_proj = Linear(args.hidden_size, q + 2 * kv, bias=args.attention_bias or args.qkv_bias)
        self.o_proj = Linear(q, args.hidden_size, bias=args.attention_bias)
        self.q_norm = nn.Parameter(torch.ones(self.dim), requires_grad=False) if args.qk_norm else None
        self.k_norm = nn.Parameter(torch.ones(self.dim), requires_grad=False) if args.qk_norm else None

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, cos_sin: torch.Tensor, ctx: ForwardContext, layer: int
    ) -> torch.Tensor:
        ops, t = ctx.ops, x.shape[0]
        qkv = self.qkv_proj(x)  # [tokens, (heads + 2 * kv_heads) * head_dim]
        q, k, v = qkv.split([self.n_heads * self.dim, self.n_kv * self.dim, self.n_kv * self.dim], dim=-1)
        q = q.view(t, self.n_heads, self.dim)  # [tokens, heads, head_dim]
        k = k.view(t, self.n_kv, self.dim)  # [tokens, kv_heads, head_dim]
        v = v.view(t, self.n_kv, self.dim)
        # Qwen3 (q_norm, k_norm): RMSNorm of each head before the rotation, in the same operation
        q, k = ops.rotary(positions, q, k, cos_sin, self.q_norm, self.k_norm, self.eps)
        k_cache, v_cache = ctx.kv_caches[layer]
        o = ops.attention(q, k, v, k_cache, v_cache, ctx.meta, self.scale)  # [tokens, heads, head_dim]
        return self.o_proj(o.reshape(t, self.n_heads * self.dim))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.gate_up_proj = Linear(args.hidden_size, 2 * args.intermediate_size, bias=args.mlp_bias)
        self.down_proj = Linear(args.intermediate_size, args.hidden_size, bias=args.mlp_bias)

    def forward(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        return self.down_proj(ctx.ops.silu_and_mul(self.gate_up_proj(x)))  # [tokens, hidden]


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args)
        self.input_layernorm = nn.Parameter(torch.ones(args.hidden_size), requires_grad=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(args.hidden_size), requires_grad=False)
        self.eps = args.rms_norm_eps

    def forward(self, positions, h, residual, cos_sin, ctx: ForwardContext, layer: int):
        # h, residual: [tokens, hidden]; the residual add is fused into each norm.
        x, residual = ctx.ops.rms_norm(h, self.input_layernorm, self.eps, residual)
        x = self.self_attn(positions, x, cos_sin, ctx, layer)
        x, residual = ctx.ops.rms_norm(x, self.post_attention_layernorm, self.eps, residual)
        return self.mlp(x, ctx), residual


class Model(nn.Module):
    """A decoder-only transformer: embeddings, N layers, final norm, LM head."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_hidden_layers))
        self.norm = nn.Parameter(torch.ones(args.hidden_size), requires_grad=False)
        self.lm_head = None if args.tie_word_embeddings else Linear(args.hidden_size, args.vocab_size)
        table = cos_sin_table(args.rope, args.dim_head, args.max_position_embeddings)
        self.register_buffer("cos_sin", table, persistent=False)  # [max_position, head_dim], float32

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """input_ids, positions: [tokens] -> hidden states [tokens, hidden]."""
        h = self.embed_tokens(input_ids)
        residual = None
        for i, layer in enumerate(self.layers):
            h, residual = layer(positions, h, residual, self.cos_sin, ctx, i)
        return ctx.ops.rms_norm(h, self.norm, self.args.rms_norm_eps, residual)[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [rows, hidden] -> logits [rows, vocab] in float32."""
        if self.lm_head is None:
            return nn.functional.linear(hidden, self.embed_tokens.weight).float()
        return self.lm_head(hidden).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy checkpoint tensors (Hugging Face names) in; returns the parameter names filled."""
        return load_decoder_weights(self, weights)


# checkpoint name piece -> (packed parameter piece, index of the shard in it)
PACKED = {
    "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
}  # fmt: skip


def load_decoder_weights(model: Model, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
    params = dict(model.named_parameters())
    a = model.args
    q, kv, inter = a.num_attention_heads * a.dim_head, a.n_kv_heads * a.dim_head, a.intermediate_size
    offsets = {"qkv_proj": (0, q, q + kv, q + 2 * kv), "gate_up_proj": (0, inter, 2 * inter)}
    filled: set[str] = set()
    for name, tensor in weights:
        name = name.removeprefix("model.")
        if name.endswith("rotary_emb.inv_freq"):
            continue
        name = name.replace("self_attn.q_norm.weight", "self_attn.q_norm").replace("self_attn.k_norm.weight", "self_attn.k_norm")
        for suffix in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            name = name.replace(suffix, suffix.removesuffix(".weight"))
        if name == "norm.weight":
            name = "norm"
        for piece, (packed, shard) in PACKED.items():
            if f".{piece}." in name:
                name = name.replace(piece, packed)
                lo, hi = offsets[packed][shard], offsets[packed][shard + 1]
                params[name].data[lo:hi].copy_(tensor)
                break
        else:
            if name not in params:
                continue  # e.g. lm_head.weight of a tied checkpoint
            params[name].data.copy_(tensor)
        filled.add(name)
    return filled


__all__ = ["ModelArgs", "Model", "Linear", "Attention", "MLP", "DecoderLayer", "load_decoder_weights"]
