"""The paged backend through the Backend protocol, with the real starter model."""

from __future__ import annotations

import threading

import pytest

from engine.backends import create_backend
from engine.backends.base import Backend
from engine.errors import ContextLengthExceeded, InvalidRequest
from engine.types import ChatMessage, GenerationRequest, ResponseFormat, SamplingParams

QUESTION = (ChatMessage("user", "Name three colours."),)


def run(backend, *, messages=QUESTION, prompt=None, **params):
    req = GenerationRequest(
        model="s", messages=None if prompt else messages, prompt=prompt, params=SamplingParams(**params)
    )
    chunks = list(backend.stream(req))
    return "".join(c.text for c in chunks), chunks


def wait_idle(backend) -> dict:
    for _ in range(500):
        stats = backend.stats()
        if stats["running"] == 0 and stats["waiting"] == 0:
            return stats
        threading.Event().wait(0.01)
    return backend.stats()


def test_create_backend_gives_a_paged_backend_that_fits_the_protocol(paged_backend):
    from engine.backends.paged import PagedBackend

    assert isinstance(create_backend("paged"), PagedBackend)
    assert isinstance(paged_backend, Backend)


def test_answers_a_chat_and_ends_with_a_finish_reason_carrying_counts(paged_backend):
    text, chunks = run(paged_backend, temperature=0, max_tokens=24)
    assert text.strip()
    final = chunks[-1]
    assert final.finish_reason in ("stop", "length")
    assert all(c.finish_reason is None for c in chunks[:-1])
    assert final.prompt_tokens > 5
    assert final.completion_tokens == sum(len(c.token_ids) for c in chunks)
    assert final.time_to_first_token is not None and final.time_to_first_token > 0


def test_info_describes_the_model(paged_backend):
    info = paged_backend.info
    assert info.backend == "paged" and info.architecture == "llama"
    assert info.n_ctx == 2048 and info.n_ctx_train == 8192 and info.vocab_size == 49152
    assert info.has_chat_template and info.parameters > 100_000_000


def test_tokens_equal_llama_cpp_tokens(paged_backend, llama_backend):
    texts = ["Hello world!", "  two  spaces and 12345 digits", "naïve café — ünïcödé 😀", "line\n\nbreaks\tand tabs",
             "<|im_start|>user\nHi<|im_end|>", "don't won't it's", "x" * 50]  # fmt: skip
    for text in texts:
        assert paged_backend.tokenize(text) == llama_backend.tokenize(text), text
        assert paged_backend.tokenize(text, special=True) == llama_backend.tokenize(text, special=True), text
    assert paged_backend.render_chat(QUESTION) == llama_backend.render_chat(QUESTION)


def test_max_tokens_is_exact(paged_backend):
    _, chunks = run(paged_backend, temperature=0, max_tokens=7, ignore_eos=True)
    assert chunks[-1].finish_reason == "length" and chunks[-1].completion_tokens == 7


def test_stop_string_ends_the_answer_without_leaking(paged_backend):
    full, _ = run(paged_backend, prompt="1, 2, 3, 4, 5, 6,", temperature=0, max_tokens=16, ignore_eos=True)
    assert " 9" in full
    text, chunks = run(paged_backend, prompt="1, 2, 3, 4, 5, 6,", temperature=0, max_tokens=16, stop=[" 9"])
    assert chunks[-1].finish_reason == "stop"
    assert text == full[: full.index(" 9")]


def test_stop_token_id_ends_the_answer(paged_backend):
    _, chunks = run(paged_backend, prompt="1, 2, 3, 4, 5, 6,", temperature=0, max_tokens=16, ignore_eos=True)
    ids = [t for c in chunks for t in c.token_ids]
    _, stopped = run(paged_backend, prompt="1, 2, 3, 4, 5, 6,", temperature=0, max_tokens=16, stop_token_ids=[ids[3]])
    assert stopped[-1].finish_reason == "stop"
    assert [t for c in stopped for t in c.token_ids] == ids[: ids.index(ids[3])]


def test_seed_reproduces_and_another_seed_differs(paged_backend):
    a, _ = run(paged_backend, temperature=1.0, max_tokens=24, seed=1234)
    b, _ = run(paged_backend, temperature=1.0, max_tokens=24, seed=1234)
    assert a == b
    others = {run(paged_backend, temperature=1.0, max_tokens=24, seed=s)[0] for s in (1, 2, 3)}
    assert others - {a}


def test_logprobs_are_reported_per_token(paged_backend):
    _, chunks = run(paged_backend, temperature=0, max_tokens=5, logprobs=3, ignore_eos=True)
    lps = [lp for c in chunks for lp in c.logprobs]
    assert len(lps) == 5
    for lp in lps:
        assert lp.logprob <= 0 and len(lp.top) == 3
        assert lp.top[0][1] >= lp.top[1][1] >= lp.top[2][1]
        assert abs(lp.top[0][1] - lp.logprob) < 1e-5


def test_cancel_mid_stream_finishes_with_cancelled(paged_backend):
    req = GenerationRequest(model="s", prompt="Once upon a time",
                            params=SamplingParams(temperature=0, max_tokens=500, ignore_eos=True))  # fmt: skip
    seen = []
    for chunk in paged_backend.stream(req):
        seen.append(chunk)
        if len(seen) == 3:
            paged_backend.cancel(req.request_id)
    assert seen[-1].finish_reason == "cancelled" and seen[-1].completion_tokens < 20


def test_closing_the_stream_frees_the_blocks_at_once(paged_backend):
    req = GenerationRequest(model="s", prompt="Hello", params=SamplingParams(temperature=0, max_tokens=500, ignore_eos=True))
    stream = paged_backend.stream(req)
    next(stream)
    assert paged_backend.stats()["blocks_used"] > 0
    stream.close()
    stats = wait_idle(paged_backend)
    assert stats["running"] == 0 and stats["blocks_used"] == 0


def test_a_repeated_prompt_hits_the_prefix_cache(paged_backend):
    prompt = "The history of the printing press. " * 20
    run(paged_backend, prompt=prompt, temperature=0, max_tokens=2)
    _, chunks = run(paged_backend, prompt=prompt + "Tell me more.", temperature=0, max_tokens=2)
    assert chunks[-1].cached_tokens >= 128
    stats = paged_backend.stats()
    assert stats["prefix_cache_hit_rate"] > 0 and stats["blocks_total"] == 640


def test_prompt_over_the_context_raises_before_generating(paged_backend):
    with pytest.raises(ContextLengthExceeded) as info:
        paged_backend.stream(GenerationRequest(model="s", prompt="word " * 3000))
    assert info.value.n_ctx == 2048 and info.value.prompt_tokens > 2048


def test_unsupported_requests_are_refused_with_a_clear_error(paged_backend):
    with pytest.raises(InvalidRequest, match="JSON"):
        paged_backend.stream(GenerationRequest(model="s", prompt="hi", response_format=ResponseFormat(type="json_object")))
    with pytest.raises(InvalidRequest, match="logit_bias"):
        paged_backend.stream(GenerationRequest(model="s", prompt="hi", params=SamplingParams(logit_bias={10**7: 1.0})))


def test_the_engine_thread_loads_the_model_and_load_errors_reach_the_caller(tmp_path, monkeypatch):
    """torch's CPU ops run on an OpenMP team per calling thread: the engine thread that runs the model
    also loads it, so a process with one model has one team (a second slows every decode step)."""
    from engine.backends.base import LoadOptions, ModelSpec
    from engine.backends.paged import PagedBackend
    from engine.backends.paged import backend as backend_module
    from engine.errors import ModelLoadError

    from .test_models import make_checkpoint

    make_checkpoint(tmp_path, "LlamaConfig", {})
    threads: list[str] = []
    real = backend_module.start_engine

    def recording(path, options):
        threads.append(threading.current_thread().name)
        return real(path, options)

    monkeypatch.setattr(backend_module, "start_engine", recording)
    backend = PagedBackend()
    backend.load(ModelSpec("tiny", tmp_path), LoadOptions(n_ctx=64, extra={"num_kv_blocks": 16, "device": "cpu"}))
    try:
        assert threads == [backend._thread.name] and threads[0] != threading.current_thread().name
        steps: list[str] = []
        runner = backend.loaded.engine.runner
        real_run = runner.run
        monkeypatch.setattr(runner, "run", lambda batch: steps.append(threading.current_thread().name) or real_run(batch))
        chunks = list(backend.stream(GenerationRequest(model="tiny", prompt="the", params=SamplingParams(max_tokens=3))))
        assert chunks[-1].finish_reason == "length" and set(steps) == set(threads)
    finally:
        backend.close()
    broken = PagedBackend()
    with pytest.raises(ModelLoadError):
        broken.load(ModelSpec("missing", tmp_path / "missing"), LoadOptions())
    assert broken._thread is None and broken.loaded is None
