"""The model zoo by convention: ``model_type`` names the module that exports ``ModelArgs`` and ``Model``."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import torch

from engine.errors import ModelLoadError

# model_type -> module under engine.backends.paged.models
MODEL_TYPES: dict[str, str] = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
}


def model_module(model_type: str, *, path: str = "config.json") -> ModuleType:
    """The module implementing ``model_type``.

    Raises:
        ModelLoadError: no module implements it.
    """
    name = MODEL_TYPES.get(model_type)
    if name is None:
        raise ModelLoadError(
            path,
            f"the paged engine does not support model type '{model_type}' "
            f"(supported: {', '.join(sorted(MODEL_TYPES))}).",
        )
    return importlib.import_module(f"engine.backends.paged.models.{name}")


def build_model(config: dict[str, Any], weights: Iterable, *, dtype: torch.dtype, device: torch.device, path: str):
    """The model for ``config`` with ``weights`` loaded, in ``dtype`` on ``device``, ready for inference.

    Raises:
        ModelLoadError: the model type is unsupported, or a weight is missing or misshapen.
    """
    module = model_module(config.get("model_type", ""), path=path)
    args = module.ModelArgs.from_dict(config)
    with torch.device("meta"):
        model = module.Model(args)
    model = model.to_empty(device="cpu")
    model.register_buffer("cos_sin", _table(args), persistent=False)  # meta init left it empty
    try:
        filled = model.load_weights(weights)
    except (RuntimeError, KeyError) as exc:
        raise ModelLoadError(path, f"a weight does not fit the model's config ({exc}).") from exc
    missing = sorted(set(dict(model.named_parameters())) - filled)
    if missing:
        raise ModelLoadError(path, f"weights are missing: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}.")
    return model.to(device=device, dtype=dtype).eval()


def _table(args) -> torch.Tensor:
    from engine.backends.paged.rope import cos_sin_table

    return cos_sin_table(args.rope, args.dim_head, args.max_position_embeddings)


__all__ = ["MODEL_TYPES", "model_module", "build_model"]
