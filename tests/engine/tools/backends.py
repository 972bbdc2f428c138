"""The backends that run on this machine, loaded on one model for a test of what each must do alike."""

from __future__ import annotations

import pytest

from engine.backends.base import Backend, LoadOptions, ModelSpec, PagedOptions


def load_backend(kind: str, spec: ModelSpec, *, n_ctx: int, n_seq: int = 1) -> Backend:
    """``spec`` loaded on llama.cpp (``kind`` "llama"), the paged engine on the CPU ("paged", skipped without
    torch; "paged-process": in a process of its own) or MLX ("mlx", skipped without it; one sequence), with
    ``n_ctx`` tokens for each of ``n_seq`` sequences."""
    if kind == "llama":
        from engine.backends.llamacpp import LlamaCppBackend

        backend, options = LlamaCppBackend(), LoadOptions(n_ctx=n_ctx, n_seq_max=n_seq)
    elif kind == "mlx":
        mlx = pytest.importorskip("engine.backends.mlx", reason="MLX is not installed")
        backend, options = mlx.MLXBackend(), LoadOptions(n_ctx=n_ctx)
    else:
        pytest.importorskip("torch")
        from engine.backends.paged import PagedBackend

        blocks = -(-n_ctx * n_seq // 16)  # its KV blocks hold 16 tokens each
        backend = PagedBackend(process=kind == "paged-process")  # in its own process, as `hearth serve` runs it
        options = LoadOptions(n_ctx=n_ctx, n_seq_max=n_seq, paged=PagedOptions(num_kv_blocks=blocks, device="cpu"))
    backend.load(spec, options)
    return backend
