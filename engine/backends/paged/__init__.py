"""Hearth's paged engine: PagedAttention KV cache, continuous batching, prefix caching, fused kernels.

``PagedBackend`` is imported lazily so that the torch-free parts (block manager, scheduler)
load without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.backends.paged.backend import PagedBackend

__all__ = ["PagedBackend"]


def __getattr__(name: str) -> Any:
    if name == "PagedBackend":
        from engine.backends.paged.backend import PagedBackend

        return PagedBackend
    raise AttributeError(name)
