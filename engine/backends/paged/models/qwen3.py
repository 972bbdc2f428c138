"""Qwen3: the Llama decoder with an RMSNorm on each query and key head before the rotation."""

from __future__ import annotations

import dataclasses

from engine.backends.paged.models.llama import Model as _Decoder
from engine.backends.paged.models.llama import ModelArgs as _LlamaArgs


@dataclasses.dataclass(frozen=True, slots=True)
class ModelArgs(_LlamaArgs):
    qk_norm: bool = True
    use_sliding_window: bool = False


class Model(_Decoder):
    """Qwen3's decoder: the shared one, built from Qwen3's args."""


__all__ = ["ModelArgs", "Model"]
