"""Read a checkpoint: a Hugging Face directory (config.json, safetensors, tokenizer.json) or a GGUF file.

Both give a :class:`Checkpoint`: a Hugging Face-style config dict, the tokenizer, the chat
template and a stream of (Hugging Face name, tensor) pairs for ``Model.load_weights``.
GGUF tensors are dequantized with the `gguf` package; llama.cpp stores the Q and K projections
of Llama-family models permuted for its own RoPE layout, so they are permuted back here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.backends.paged.tokenizer import Tokenizer
from engine.errors import ModelLoadError

Weights = Iterator[tuple[str, torch.Tensor]]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    path: Path
    config: dict[str, Any]
    tokenizer: Tokenizer
    chat_template: str | None
    weights: Callable[[], Weights]
    bos_token: str = ""
    eos_token: str = ""


def read_checkpoint(path: Path) -> Checkpoint:
    """The config, tokenizer, template and weights at ``path`` (a directory or a .gguf file).

    Raises:
        ModelLoadError: the path is missing or not a readable checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        return read_hf_dir(path)
    if path.is_file():
        with path.open("rb") as f:
            if f.read(4) == b"GGUF":
                from engine.backends.paged.gguf_reader import read_gguf

                return read_gguf(path)
        raise ModelLoadError(str(path), "it is neither a GGUF file nor a Hugging Face model folder.")
    raise ModelLoadError(str(path), "the path does not exist; check it or pull the model again.")


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(str(path), f"the file is not valid JSON ({exc}).") from exc


def _token(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def read_hf_dir(path: Path) -> Checkpoint:
    config = _json(path / "config.json")
    if not config:
        raise ModelLoadError(str(path), "config.json is missing; a Hugging Face model folder needs one.")
    config = config.get("text_config", config) if "model_type" not in config else config
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(str(path), "there are no .safetensors files in the folder.")
    if not (path / "tokenizer.json").is_file():
        raise ModelLoadError(str(path), "tokenizer.json is missing; the paged engine needs the fast tokenizer file.")
    tok_cfg = _json(path / "tokenizer_config.json")
    gen_cfg = _json(path / "generation_config.json")
    template = tok_cfg.get("chat_template")
    if isinstance(template, list):  # named templates: take the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if (path / "chat_template.jinja").is_file():
        template = (path / "chat_template.jinja").read_text(encoding="utf-8")
    bos, eos = _token(tok_cfg.get("bos_token")), _token(tok_cfg.get("eos_token"))
    eos_ids = gen_cfg.get("eos_token_id", config.get("eos_token_id"))
    eos_list: list[str | int] = list(eos_ids) if isinstance(eos_ids, list) else [eos_ids] if eos_ids is not None else []
    if eos:
        eos_list.append(eos)
    tokenizer = Tokenizer.from_hf_json(
        str(path / "tokenizer.json"), bos_token=bos, eos_tokens=eos_list, add_bos=tok_cfg.get("add_bos_token")
    )

    def weights() -> Weights:
        from safetensors import safe_open

        for file in files:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    yield name, f.get_tensor(name)

    return Checkpoint(path, config, tokenizer, template, weights, bos or "", eos or "")


# GGUF tensor name pieces -> Hugging Face name pieces
GGUF_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}  # fmt: skip
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face parameter name of a GGUF tensor, or None for tensors the models do not take."""
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}  # fmt: skip
    if gguf_name in top:
        return top[gguf_name]
    m = _BLOCK.match(gguf_name)
    if m is None or m.group(2) not in GGUF_NAMES:
        return None
    return f"model.layers.{m.group(1)}.{GGUF_NAMES[m.group(2)]}.{m.group(3)}"


def permute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp's Q/K row permutation (rotate-half halves -> interleaved RoPE pairs), as its converter does."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo :func:`permute_qk`."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


__all__ = ["Checkpoint", "read_checkpoint", "read_hf_dir", "hf_name", "permute_qk", "unpermute_qk"]
