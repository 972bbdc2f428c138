"""Load a model for MLX: a GGUF file, a Hugging Face safetensors folder, or an MLX-quantized folder."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn

from engine.backends.base import ModelSpec
from engine.backends.mlx.gguf import build_gguf_model
from engine.chat_template import ChatTemplate
from engine.errors import ModelLoadError
from engine.gguf import Vocabulary, read_metadata, vocabulary_from_folder, vocabulary_from_gguf

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
DEFAULT_CTX_TRAIN = 4096


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready for MLX, with the facts the backend reports about it."""

    model: nn.Module
    vocab: Vocabulary
    path: Path
    architecture: str
    n_ctx_train: int
    n_params: int | None


def on_cpu() -> bool:
    """Whether MLX computes on the CPU here (its Linux build), where 16-bit floats are slow."""
    return mx.default_device().type == mx.DeviceType.cpu


def count_parameters(model: nn.Module) -> int:
    """Weights in the model, counting each quantized weight once."""
    from mlx.utils import tree_flatten

    # tree_flatten is annotated as list-or-dict; without a ``destination`` it returns the list.
    total = 0
    for _, module in cast(list[tuple[str, Any]], tree_flatten(model.leaf_modules(), is_leaf=nn.Module.is_module)):
        if hasattr(module, "bits"):
            total += module.weight.size * 32 // module.bits + (module.bias.size if "bias" in module else 0)
        else:
            total += sum(v.size for _, v in cast(list[tuple[str, Any]], tree_flatten(module.parameters())))
    return total


def is_gguf(path: Path) -> bool:
    if not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(4) == GGUF_MAGIC


def load_gguf(path: Path) -> LoadedModel:
    """A llama-family GGUF file, Q4_0/Q4_1/Q8_0 weights kept quantized.

    Raises:
        ModelLoadError: the file is not GGUF, is damaged, or holds a model the mlx backend cannot run.
    """
    if not is_gguf(path):
        raise ModelLoadError(str(path), "it is not a GGUF file.")
    try:
        loaded = mx.load(str(path), return_metadata=True)
    except (RuntimeError, ValueError, OSError) as exc:
        raise ModelLoadError(str(path), f"MLX could not read it (truncated or corrupt?): {exc}.") from exc
    if not isinstance(loaded, tuple):  # return_metadata gives (weights, metadata)
        raise ModelLoadError(str(path), "MLX read no metadata from it; pull the model again.")
    weights, meta = loaded
    vocab = vocabulary_from_gguf(path, read_metadata(path))
    dtype = mx.float32 if on_cpu() else mx.float16
    model, args = build_gguf_model(path, weights, meta, dtype=dtype)
    mx.eval(model.parameters())
    return LoadedModel(
        model=model,
        vocab=vocab,
        path=path,
        architecture=str(meta.get("general.architecture", "")),
        n_ctx_train=int(args.max_position_embeddings or DEFAULT_CTX_TRAIN),
        n_params=count_parameters(model),
    )


def rope_overrides(config: dict) -> dict:
    """Top-level ``rope_theta``/``rope_scaling`` for a config written by transformers 5, which nests
    them in ``rope_parameters`` where mlx-lm's model arguments do not look."""
    nested = config.get("rope_parameters")
    if not isinstance(nested, dict) or not all(not isinstance(v, dict) for v in nested.values()):
        return {}  # absent, or per-layer-type parameters that the model's own code reads
    out: dict = {}
    if "rope_theta" in nested and "rope_theta" not in config:
        out["rope_theta"] = nested["rope_theta"]
    if nested.get("rope_type", "default") != "default" and not config.get("rope_scaling"):
        out["rope_scaling"] = {k: v for k, v in nested.items() if k != "rope_theta"}
    return out


def load_folder(folder: Path) -> LoadedModel:
    """A Hugging Face safetensors folder, plain or MLX-quantized, through mlx-lm's model zoo.

    Raises:
        ModelLoadError: the folder lacks config.json or weights, or its architecture is unknown to mlx-lm.
    """
    from mlx_lm.utils import load_config, load_model

    if not (folder / "config.json").is_file():
        raise ModelLoadError(
            str(folder), "the folder has no config.json; it is not a Hugging Face or MLX model."
        )
    try:
        model, config = load_model(folder, strict=True, model_config=rope_overrides(load_config(folder)))
    except FileNotFoundError as exc:
        raise ModelLoadError(str(folder), "the folder holds no model*.safetensors weights.") from exc
    except ValueError as exc:  # unknown model_type, or weights that do not match the config
        raise ModelLoadError(str(folder), f"mlx-lm cannot build it ({exc}).") from exc
    if on_cpu():
        # The CPU computes 16-bit floats slowly; float32 weights (and quantization scales) run far faster.
        model.set_dtype(mx.float32)
        mx.eval(model.parameters())
    vocab = vocabulary_from_folder(folder)
    n_ctx = config.get("max_position_embeddings") or config.get("text_config", {}).get(
        "max_position_embeddings"
    )
    return LoadedModel(
        model=model,
        vocab=vocab,
        path=folder,
        architecture=str(config.get("model_type", "")),
        n_ctx_train=int(n_ctx or DEFAULT_CTX_TRAIN),
        n_params=count_parameters(model),
    )


def load(spec: ModelSpec) -> LoadedModel:
    """Load ``spec`` for MLX, choosing the reader by what lies at its path.

    Raises:
        ModelLoadError: nothing usable lies at the path.
    """
    path = Path(spec.path)
    if not path.exists():
        raise ModelLoadError(str(path), "nothing is there; check the path or pull the model again.")
    if path.is_file() and (spec.format == "gguf" or path.suffix.lower() == ".gguf"):
        loaded = load_gguf(path)
    else:  # a folder, or a file inside one (config.json, a shard): the folder
        loaded = load_folder(path.parent if path.is_file() else path)
    if spec.chat_template:  # an Ollama model's translated template replaces the file's, as on the other backends
        own = loaded.vocab.chat_template
        loaded.vocab.chat_template = ChatTemplate(spec.chat_template, bos_token=own.bos_token, eos_token=own.eos_token,
                                                  specials=own.specials)  # fmt: skip
    return loaded


__all__ = ["LoadedModel", "load", "load_gguf", "load_folder", "on_cpu", "count_parameters"]
