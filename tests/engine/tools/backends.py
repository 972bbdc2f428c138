"""The two backends that run on this machine, loaded on one model for a test of what both must do alike."""

from __future__ import annotations

import pytest

from engine.backends.base import Backend, LoadOptions, ModelSpec, PagedOptions


def load_backend(kind: str, spec: ModelSpec, *, n_ctx: int, n_seq: int = 1) -> Backend:
    """``spec`` loaded on llama.cpp (``kind`` "llama") or the paged engine on the CPU ("paged", skipped without
    torch), with ``n_ctx`` tokens for each of ``n_seq`` sequences."""
    if kind == "llama":
        from engine.backends.llamacpp import LlamaCppBackend

        backend, options = LlamaCppBackend(), LoadOptions(n_ctx=n_ctx, n_seq_max=n_seq)
    else:
        pytest.importorskip("torch")
        from engine.backends.paged import PagedBackend

        blocks = -(-n_ctx * n_seq // 16)  # its KV blocks hold 16 tokens each
        backend = PagedBackend()
        options = LoadOptions(n_ctx=n_ctx, n_seq_max=n_seq, paged=PagedOptions(num_kv_blocks=blocks, device="cpu"))
    backend.load(spec, options)
    return backend
