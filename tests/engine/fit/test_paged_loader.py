"""The paged engine sizes its KV block pool with the memory model: the loader allocates the blocks
`hearth fit` and /api/fit show for it, says why in its stats, and refuses a context the pool cannot hold."""

from __future__ import annotations

import pytest

from engine.backends.base import LoadOptions, PagedOptions
from engine.errors import ModelLoadError
from engine.types import GenerationRequest, SamplingParams
from tests.engine.fit.loading import load_starter


def _load(starter_path, options: LoadOptions):
    pytest.importorskip("torch")
    from engine.backends.paged import PagedBackend

    return load_starter(PagedBackend(), starter_path, options)


def test_the_paged_loader_allocates_the_pool_the_fit_report_shows_and_says_why(starter_path):
    from engine.fit.report import fit_model
    from engine.hardware import detect_hardware

    backend = _load(starter_path, LoadOptions(n_ctx=256, n_seq_max=2, paged=PagedOptions(device="cpu")))
    try:
        stats = backend.stats()
        assert stats is not None
        plan = stats.details["load_plan"]
        # two sequences of 256 tokens use 32 blocks of 16: a quarter of any RAM holds that, so the cap decides
        assert plan["kv_blocks"] == stats.details["blocks_total"] == 32
        assert plan["fits"] and plan["n_ctx"] == 256 and "32 KV blocks" in plan["reason"]
        assert "what 2 sequences of 256 tokens use" in plan["reason"]
        # a float32 cache: 30 layers x 3 KV heads x 64 x 2 x 4 bytes a token
        assert plan["memory"]["kv_cache_bytes"] == 32 * 16 * 30 * 3 * 64 * 2 * 4
        fit = fit_model(str(starter_path), detect_hardware(), n_ctx=256, n_seq=2, backend="paged").plan
        assert fit.kv_blocks == plan["kv_blocks"] and fit.memory.to_dict() == plan["memory"]
        request = GenerationRequest(model="starter", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=4))
        assert list(backend.stream(request))[-1].finish_reason in ("stop", "length")
    finally:
        backend.close()


def test_an_asked_context_the_pool_cannot_hold_is_refused_naming_what_would_fit(starter_path):
    # 64 blocks of 16 tokens hold 1,024 tokens: a 2,048-token context is refused, not quietly shortened
    options = LoadOptions(n_ctx=2048, n_seq_max=2, paged=PagedOptions(device="cpu", num_kv_blocks=64))
    with pytest.raises(ModelLoadError, match=r"holds 1,024 tokens; --ctx 1024 would fit"):
        _load(starter_path, options)
