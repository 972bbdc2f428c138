"""The llama.cpp loader plans with the memory model: slots under a small budget, the KV cache type
applied, the plan in its stats, and settings that cannot fit refused with what would."""

from __future__ import annotations

import pytest

from engine.backends.base import LlamaCppOptions, LoadOptions
from engine.errors import InvalidRequest, ModelLoadError
from engine.fit.plan import prefill_block
from engine.types import GenerationRequest, SamplingParams
from tests.engine.fit.loading import load_starter

MIB = 1024**2


def _load(starter_path, options: LoadOptions):
    from engine.backends.llamacpp import LlamaCppBackend

    return load_starter(LlamaCppBackend(), starter_path, options)


def _answer(backend) -> str:
    request = GenerationRequest(model="starter", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=4))
    chunks = list(backend.stream(request))
    assert chunks[-1].finish_reason in ("stop", "length")
    return "".join(c.text for c in chunks)


def test_the_loader_opens_the_slots_the_budget_allows_and_says_why(starter_path):
    backend = _load(starter_path, LoadOptions(n_ctx=1024, llamacpp=LlamaCppOptions(memory_budget=300 * MIB)))
    try:
        plan = backend.plan
        assert plan.fits and 1 < plan.n_seq < 16 and plan.memory.total <= 300 * MIB
        assert backend.loop.n_seq_max == plan.n_seq and backend.info.n_ctx == 1024
        assert backend.loop.prefill_block == prefill_block(plan.gpu_layers) == 256  # on the CPU
        stats = backend.stats().details["load_plan"]
        assert stats["parallel"] == plan.n_seq and stats["kv_type"] == "f16" and "more would not fit" in stats["reason"]
        assert stats["memory"]["kv_cache_bytes"] == plan.n_seq * 1024 * 23040
        _answer(backend)
    finally:
        backend.close()


def test_an_explicit_parallel_that_cannot_fit_is_refused_naming_what_would(starter_path):
    budget = LlamaCppOptions(memory_budget=600 * MIB)
    options = LoadOptions(n_ctx=4096, n_seq_max=16, kv_type="f16", llamacpp=budget)
    with pytest.raises(ModelLoadError) as err:
        _load(starter_path, options)
    message = str(err.value)
    assert "16 slots of 4,096 tokens need about" in message and "would fit" in message
    slots = int(message.split("(--parallel ")[1].split(")")[0])
    backend = _load(starter_path, LoadOptions(n_ctx=4096, n_seq_max=slots, kv_type="f16", llamacpp=budget))
    backend.close()


def test_a_quantized_kv_cache_is_applied(starter_path):
    import llama_cpp

    sizes = {}
    for kv in ("f16", "q8_0"):
        backend = _load(starter_path, LoadOptions(n_ctx=512, n_seq_max=1, kv_type=kv))
        try:
            assert backend.plan.kv_type == kv
            _answer(backend)
            # the state holds the cached tokens' keys and values in the cache's own type
            sizes[kv] = backend.loop.call(lambda b=backend: llama_cpp.llama_state_get_size(b.loop.ctx))
        finally:
            backend.close()
    assert sizes["q8_0"] < sizes["f16"]
    with pytest.raises(InvalidRequest, match="needs flash attention"):
        _load(starter_path, LoadOptions(n_ctx=1024, kv_type="q4_0", llamacpp=LlamaCppOptions(flash_attn=False)))
    with pytest.raises(InvalidRequest, match="f16, q8_0, q4_0"):
        _load(starter_path, LoadOptions(kv_type="q5_1"))
