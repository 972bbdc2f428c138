"""Qwen2 and Qwen2.5: the Llama decoder with biases on the Q, K and V projections."""

from __future__ import annotations

import dataclasses

from engine.backends.paged.models.llama import Model as _Decoder
from engine.backends.paged.models.llama import ModelArgs as _LlamaArgs


@dataclasses.dataclass(frozen=True, slots=True)
class ModelArgs(_LlamaArgs):
    qkv_bias: bool = True
    use_sliding_window: bool = False  # its sliding_window applies only when set (ModelArgs.from_dict)


class Model(_Decoder):
    """Qwen2's decoder: the shared one, built from Qwen2's args."""


__all__ = ["ModelArgs", "Model"]
