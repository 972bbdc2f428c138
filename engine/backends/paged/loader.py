"""Read a checkpoint: a Hugging Face directory (config.json, safetensors, tokenizer.json) or a GGUF file.

Both give a :class:`Checkpoint`: a Hugging Face-style config dict, the tokenizer, the chat
template and a stream of (Hugging Face name, tensor) pairs for ``Model.load_weights``.
GGUF tensors are dequantized with the `gguf` package; llama.cpp stores the Q and K projections
of Llama-family models permuted for its own RoPE layout, so they are permuted back here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.errors import ModelLoadError
from engine.gguf.vocab import Vocabulary, folder_chat_template, vocabulary_from_folder

Weights = Iterator[tuple[str, torch.Tensor]]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    path: Path
    config: dict[str, Any]
    tokenizer: Vocabulary
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


def read_hf_dir(path: Path) -> Checkpoint:
    config = _json(path / "config.json")
    if not config:
        raise ModelLoadError(str(path), "config.json is missing; a Hugging Face model folder needs one.")
    config = config.get("text_config", config) if "model_type" not in config else config
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(str(path), "there are no .safetensors files in the folder.")
    tokenizer = vocabulary_from_folder(path, allow_slow=False)
    template = folder_chat_template(path, _json(path / "tokenizer_config.json"))

    def weights() -> Weights:
        from safetensors import safe_open

        for file in files:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    yield name, f.get_tensor(name)

    bos, eos = tokenizer.token_text(tokenizer.bos_id), tokenizer.token_text(tokenizer.eos_id)
    return Checkpoint(path, config, tokenizer, template, weights, bos, eos)


def permute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """llama.cpp's Q/K row permutation (rotate-half halves -> interleaved RoPE pairs), as its converter does."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo :func:`permute_qk`."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


__all__ = ["Checkpoint", "read_checkpoint", "read_hf_dir", "permute_qk", "unpermute_qk"]
