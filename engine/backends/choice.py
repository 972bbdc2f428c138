"""Which backend runs a model here, and why, in words."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

from engine.errors import BackendUnavailable


@dataclass(frozen=True, slots=True)
class BackendChoice:
    backend: str
    reason: str


def is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def has_cuda() -> bool:
    """Whether an NVIDIA GPU is usable through torch (without importing torch if it is absent)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def choose_backend(model_format: str, *, override: str | None = None, cuda: bool | None = None) -> BackendChoice:
    """The backend for a model of ``model_format`` on this machine.

    Args:
        model_format: ``gguf``, ``safetensors`` or ``mlx``.
        override: The user's choice, which wins when it can run the format.
        cuda: Whether a CUDA GPU is usable (detected when None).

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
        if is_apple_silicon():
            return BackendChoice("llamacpp", "GGUF files run on llama.cpp, which uses Metal on Apple Silicon")
        return BackendChoice("llamacpp", "GGUF files run on llama.cpp, on the CPU or with GPU offload")
    if model_format == "mlx":
        if is_apple_silicon():
            return BackendChoice("mlx", "MLX-format models run on MLX, the fastest path on Apple Silicon")
        return BackendChoice("mlx", "MLX-format models need MLX (its CPU build here, slower than on a Mac)")
    if is_apple_silicon():
        return BackendChoice("mlx", "safetensors models run on MLX on Apple Silicon")
    cuda = has_cuda() if cuda is None else cuda
    if cuda:
        return BackendChoice("paged", "safetensors models run on Hearth's paged engine on the NVIDIA GPU")
    return BackendChoice("paged", "safetensors models run on Hearth's paged engine; with no GPU here it runs on the CPU, slowly")
