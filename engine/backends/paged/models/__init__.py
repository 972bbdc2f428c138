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
            f"(supported: {', '.join(sorted(MODEL_TYPES))}); run a GGUF of it on the llama.cpp backend.",
        )
    return importlib.import_module(f"engine.backends.paged.models.{name}")


#: The MLP activations the decoder computes (its fused ``silu_and_mul``); "swish" is SiLU's other name.
ACTIVATIONS = ("silu", "swish")


def model_args(config: dict[str, Any], *, path: str) -> Any:
    """The ``ModelArgs`` of ``config``, checked for what the engine computes.

    Raises:
        ModelLoadError: the model type, its activation or its RoPE scaling is not one the engine runs (a model it
            would run with other numbers than its own is refused, not served).
    """
    from engine.backends.paged.rope import ROPE_TYPES

    module = model_module(config.get("model_type", ""), path=path)
    act = config.get("hidden_act") or "silu"
    if act not in ACTIVATIONS:
        raise ModelLoadError(path, f"its activation '{act}' is not one the paged engine computes (silu); "
                                   "run a GGUF of it on the llama.cpp backend.")  # fmt: skip
    args = module.ModelArgs.from_dict(config)
    kind = args.rope.get("rope_type")
    if kind not in ROPE_TYPES:
        raise ModelLoadError(path, f"its RoPE scaling '{kind}' is not one the paged engine computes "
                                   f"(only {', '.join(ROPE_TYPES)}); run a GGUF of it on the llama.cpp backend.")  # fmt: skip
    return args


def build_model(config: dict[str, Any], weights: Iterable, *, dtype: torch.dtype, device: torch.device, path: str):
    """The model for ``config`` with ``weights`` loaded, in ``dtype`` on ``device``, ready for inference.

    Raises:
        ModelLoadError: the model type is unsupported, or a weight is missing or misshapen.
    """
    module = model_module(config.get("model_type", ""), path=path)
    args = model_args(config, path=path)
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


__all__ = ["ACTIVATIONS", "MODEL_TYPES", "model_module", "model_args", "build_model"]
