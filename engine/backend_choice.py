"""Which backend runs a model here, and why, in words.

``choose_backend(model_format)`` works without any hardware facts (the old behaviour); given a
:class:`engine.hardware.HardwareInfo` it also says whether llama.cpp can offload to the GPU. A GGUF
model goes to the paged engine (dequantized, on the GPU) where this llama.cpp build cannot offload
but torch sees a CUDA GPU; `make run` builds llama.cpp with CUDA where nvcc is installed.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from engine.errors import BackendUnavailable

if TYPE_CHECKING:
    from engine.hardware import HardwareInfo


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """The backend for a model, the reason in one sentence, and whether it uses the GPU."""

    backend: str
    reason: str
    gpu_offload: bool = False


def is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def has_cuda() -> bool:
    """Whether an NVIDIA GPU is usable through torch (without importing torch if it is absent)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@cache
def torch_sees_cuda() -> bool:
    """Whether torch is installed and sees a CUDA GPU; torch is imported only where a driver is present."""
    import importlib.util
    from pathlib import Path

    if importlib.util.find_spec("torch") is None:
        return False
    driver = Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()
    if sys.platform.startswith("linux") and not driver:
        return False
    return has_cuda()


@cache
def llama_gpu_offload_supported() -> bool:
    """Whether the installed llama.cpp build can offload layers to a GPU (CUDA, Metal, Vulkan...)."""
    try:
        import llama_cpp
    except ImportError:
        return False
    return bool(llama_cpp.llama_supports_gpu_offload())


def _paged_gguf(gpu: str) -> BackendChoice:
    return BackendChoice(
        "paged",
        f"GGUF files run on Hearth's paged engine on the {gpu} (dequantized to bfloat16), because this "
        f"llama.cpp build has no GPU support; `make run` builds llama.cpp with CUDA where nvcc is installed",
        True,
    )


def _gguf_choice(hardware: HardwareInfo | None, gpu_offload_supported: bool | None, cuda: bool | None) -> BackendChoice:
    apple = hardware.apple_silicon if hardware is not None else is_apple_silicon()
    if apple:
        return BackendChoice("llamacpp", "GGUF files run on llama.cpp, which uses Metal on Apple Silicon", True)
    if hardware is None:
        # no machine facts: llama.cpp, unless it cannot offload while torch has a CUDA GPU for the paged engine
        if (torch_sees_cuda() if cuda is None else cuda) and not (
            llama_gpu_offload_supported() if gpu_offload_supported is None else gpu_offload_supported
        ):
            return _paged_gguf("NVIDIA GPU")
        return BackendChoice("llamacpp", "GGUF files run on llama.cpp, on the CPU or with GPU offload")
    gpu = hardware.best_gpu
    if gpu is None:
        return BackendChoice("llamacpp", "GGUF files run on llama.cpp on the CPU, as this machine has no GPU")
    supported = llama_gpu_offload_supported() if gpu_offload_supported is None else gpu_offload_supported
    if supported:
        return BackendChoice("llamacpp", f"GGUF files run on llama.cpp with layers offloaded to the {gpu.name}", True)
    if gpu.vendor == "nvidia" and (torch_sees_cuda() if cuda is None else cuda):
        return _paged_gguf(gpu.name)
    return BackendChoice(
        "llamacpp",
        f"GGUF files run on llama.cpp on the CPU, because this llama.cpp build has no GPU support "
        f"(`make run` builds it with CUDA where the CUDA toolkit is installed, to use the {gpu.name})",
    )


def choose_backend(
    model_format: str,
    *,
    override: str | None = None,
    cuda: bool | None = None,
    hardware: HardwareInfo | None = None,
    gpu_offload_supported: bool | None = None,
) -> BackendChoice:
    """The backend for a model of ``model_format`` on this machine.

    Args:
        model_format: ``gguf``, ``safetensors`` or ``mlx``.
        override: The user's choice, which wins when it can run the format.
        cuda: Whether a CUDA GPU is usable through torch (from ``hardware`` when given, else detected); for
            GGUF, where llama.cpp cannot offload, it sends the model to the paged engine.
        hardware: The machine; with it the reason names the GPU and GPU offload is decided.
        gpu_offload_supported: Whether llama.cpp here can offload to a GPU (detected when None).

    Raises:
        BackendUnavailable: the override cannot run this format, or nothing here can.
    """
    if override and override != "auto":
        if override == "llamacpp" and model_format != "gguf":
            raise BackendUnavailable("llamacpp", f"it runs only GGUF files, and this model is {model_format}.")
        if override == "paged" and model_format == "mlx":
            raise BackendUnavailable("paged", "it cannot read MLX-quantized weights; use the mlx backend.")
        return BackendChoice(override, "chosen by you")
    if model_format == "gguf":
        return _gguf_choice(hardware, gpu_offload_supported, cuda)
    apple = hardware.apple_silicon if hardware is not None else is_apple_silicon()
    if model_format == "mlx":
        if apple:
            return BackendChoice("mlx", "MLX-format models run on MLX, the fastest path on Apple Silicon", True)
        return BackendChoice("mlx", "MLX-format models need MLX (its CPU build here, slower than on a Mac)")
    if apple:
        return BackendChoice("mlx", "safetensors models run on MLX on Apple Silicon", True)
    if cuda is None:
        cuda = hardware.has_nvidia if hardware is not None else has_cuda()
    if cuda:
        gpu = hardware.best_gpu.name if hardware is not None and hardware.best_gpu else "NVIDIA GPU"
        return BackendChoice("paged", f"safetensors models run on Hearth's paged engine on the {gpu}", True)
    return BackendChoice("paged", "safetensors models run on Hearth's paged engine; with no GPU here it runs on the CPU, slowly")
