"""GGUF tensor names -> Hugging Face parameter names, the one map every torch or MLX loader uses."""

from __future__ import annotations

import re

# Per-block GGUF name pieces -> Hugging Face name pieces (Llama, Mistral, Qwen2, Qwen3 layouts).
BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}  # fmt: skip
TOP_LEVEL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(\w+)$")


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face parameter a GGUF tensor fills (``blk.3.attn_q.weight`` ->
    ``model.layers.3.self_attn.q_proj.weight``; MLX's ``.scales``/``.biases`` suffixes carry over),
    or None for tensors the models do not take."""
    parts = gguf_name.split(".")
    if len(parts) == 2 and parts[0] in TOP_LEVEL_NAMES:
        return f"{TOP_LEVEL_NAMES[parts[0]]}.{parts[1]}"
    m = _BLOCK.match(gguf_name)
    if m is None or m.group(2) not in BLOCK_NAMES:
        return None
    return f"model.layers.{m.group(1)}.{BLOCK_NAMES[m.group(2)]}.{m.group(3)}"


__all__ = ["hf_name", "BLOCK_NAMES", "TOP_LEVEL_NAMES"]
