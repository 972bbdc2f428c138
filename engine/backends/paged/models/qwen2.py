"""Qwen2 and Qwen2.5: the Llama decoder with biases on the Q, K and V projections."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from engine.backends.paged.models.llama import Model as _Decoder
from engine.backends.paged.models.llama import ModelArgs as _LlamaArgs


@dataclasses.dataclass(frozen=True, slots=True)
class ModelArgs(_LlamaArgs):
    qkv_bias: bool = True
    use_sliding_window: bool = False

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> ModelArgs:
        args = _LlamaArgs.from_dict.__func__(cls, config)
        # Qwen2 configs carry a sliding_window that applies only when use_sliding_window is set.
        return args if args.use_sliding_window else dataclasses.replace(args, sliding_window=None)


class Model(_Decoder):
    """Qwen2's decoder: the shared one, built from Qwen2's args."""


__all__ = ["ModelArgs", "Model"]
