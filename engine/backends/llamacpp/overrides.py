"""A person's own load settings that llama.cpp takes as overrides: YaRN RoPE scaling, and MoE experts kept on
the CPU through tensor buffer overrides (what llama-server's ``--cpu-moe`` and ``--n-cpu-moe N`` do).

llama-cpp-python 0.3.36 declares ``llama_model_params.tensor_buft_overrides`` as a bare pointer and offers no
type for its entries, so the array is built here: ``{const char *pattern; ggml_backend_buffer_type_t buft}``
pairs, ended by a pair of NULLs. llama.cpp matches each pattern as a regular expression against the tensor
names and allocates the matching tensors in that buffer type: the CPU's, for experts.
"""

from __future__ import annotations

import ctypes
import pathlib
from dataclasses import dataclass
from functools import cache
from typing import Any

import llama_cpp

from engine.errors import ModelLoadError

CPU_MOE_ALL = -1
# The expert tensors of a layer: their up, down and gate projections (merged or not), as llama.cpp names them.
EXPERTS_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """YaRN scaling of a model's positions: ``factor`` times its trained context.

    Attributes:
        factor: The YaRN factor (4.0 stretches 32k trained positions over 128k).
        orig_ctx: The trained context it scales from; None: the file's.
    """

    factor: float
    orig_ctx: int | None = None

    def apply(self, params: Any) -> None:
        """Set ``params`` (a ``llama_context_params``) to scale positions this way."""
        params.rope_scaling_type = llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN
        params.rope_freq_scale = 1.0 / self.factor
        if self.orig_ctx:
            params.yarn_orig_ctx = self.orig_ctx


class TensorBuftOverride(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def expert_patterns(cpu_moe: int) -> list[str]:
    """The tensor name patterns that keep experts on the CPU: every layer's (:data:`CPU_MOE_ALL`), or the
    first ``cpu_moe`` layers' (llama-server's ``--n-cpu-moe``)."""
    if cpu_moe == CPU_MOE_ALL:
        return [EXPERTS_PATTERN]
    return [rf"^blk\.{i}{EXPERTS_PATTERN}" for i in range(cpu_moe)]


@cache
def _cpu_buffer_type() -> int:
    """ggml's CPU buffer type (``ggml_backend_cpu_buffer_type()``, exported by ggml-base)."""
    from llama_cpp._ctypes_extensions import load_shared_library

    lib = load_shared_library("ggml-base", pathlib.Path(llama_cpp.__file__).parent / "lib")
    fn = lib.ggml_backend_cpu_buffer_type
    fn.restype = ctypes.c_void_p
    fn.argtypes = []
    buft = fn()
    if not buft:
        raise ModelLoadError("llama.cpp", "its CPU buffer type is missing; MoE experts cannot be kept on the CPU.")
    return buft


def cpu_moe_overrides(cpu_moe: int | None) -> ctypes.Array[TensorBuftOverride] | None:
    """The NULL-ended override array for ``cpu_moe`` (None or 0: no array). The caller keeps it alive for
    as long as llama.cpp loads the model (it reads the patterns during the load)."""
    if not cpu_moe:
        return None
    patterns = expert_patterns(cpu_moe)
    buft = _cpu_buffer_type()
    array = (TensorBuftOverride * (len(patterns) + 1))()
    for i, pattern in enumerate(patterns):
        array[i].pattern = pattern.encode()
        array[i].buft = buft
    return array


__all__ = ["RopeScaling", "cpu_moe_overrides", "expert_patterns", "CPU_MOE_ALL", "TensorBuftOverride"]
