"""Inference backends behind one protocol. Heavy imports happen only in the backend chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.backends.base import Backend, ModelInfo, ModelSpec
from engine.backends.options import LlamaCppOptions, LoadOptions, MLXOptions, PagedOptions
from engine.errors import BackendUnavailable

if TYPE_CHECKING:  # the type checker (`make lint`) holds every backend to the protocol
    from engine.backends.llamacpp import LlamaCppBackend
    from engine.backends.mlx import MLXBackend
    from engine.backends.paged import PagedBackend

    _CONFORMING: tuple[type[Backend], ...] = (LlamaCppBackend, PagedBackend, MLXBackend)

BACKENDS: tuple[str, ...] = ("llamacpp", "paged", "mlx")


def create_backend(name: str) -> Backend:
    """A new, unloaded backend called ``name``.

    Raises:
        BackendUnavailable: the name is unknown or the backend cannot run here.
    """
    if name == "llamacpp":
        from engine.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend()
    if name == "paged":
        try:
            from engine.backends.paged import PagedBackend
        except ImportError as exc:
            raise BackendUnavailable(name, f"{exc}; install it with `pip install 'hearth[paged]'`.") from exc
        return PagedBackend(process=True)  # the loop that feeds the GPU shares no interpreter with HTTP
    if name == "mlx":
        try:
            from engine.backends.mlx import MLXBackend
        except ImportError as exc:
            raise BackendUnavailable(name, f"{exc}; install it with `pip install 'hearth[mlx]'`.") from exc
        return MLXBackend()
    raise BackendUnavailable(name, f"there is no such backend; choose one of {', '.join(BACKENDS)}.")


__all__ = [
    "Backend", "LoadOptions", "LlamaCppOptions", "PagedOptions", "MLXOptions", "ModelInfo", "ModelSpec", "BACKENDS",
    "create_backend",
]  # fmt: skip
