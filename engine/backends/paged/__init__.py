"""Hearth's paged engine: PagedAttention KV cache, continuous batching, prefix caching, fused kernels."""

from engine.backends.paged.backend import PagedBackend

__all__ = ["PagedBackend"]
