"""The llama.cpp backend with the real starter model."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.backends.base import LoadOptions, ModelSpec
from engine.backends.llamacpp import LlamaCppBackend
from engine.errors import ContextLengthExceeded, ModelLoadError
from engine.types import ChatMessage, GenerationRequest, SamplingParams

QUESTION = (ChatMessage("user", "Name three colours."),)


def run(backend, *, messages=QUESTION, prompt=None, **params):
    req = GenerationRequest(
        model="starter", messages=None if prompt else messages, prompt=prompt, params=SamplingParams(**params)
    )
    chunks = list(backend.stream(req))
    return "".join(c.text for c in chunks), chunks


def test_answers_a_chat_prompt_and_ends_with_a_finish_reason(llama_backend):
    text, chunks = run(llama_backend, temperature=0, max_tokens=40)
    assert text.strip()
    final = chunks[-1]
    assert final.finish_reason in ("stop", "length")
    assert all(c.finish_reason is None for c in chunks[:-1])
    assert final.prompt_tokens > 5
    assert final.completion_tokens == sum(len(c.token_ids) for c in chunks)
    assert final.time_to_first_token is not None and final.time_to_first_token > 0


def test_greedy_is_deterministic(llama_backend):
    a, _ = run(llama_backend, temperature=0, max_tokens=32)
    b, _ = run(llama_backend, temperature=0, max_tokens=32)
    assert a == b


def test_seed_reproduces_and_another_seed_differs(llama_backend):
    kw = dict(temperature=1.0, max_tokens=48, seed=1234)
    a, _ = run(llama_backend, **kw)
    b, _ = run(llama_backend, **kw)
    assert a == b
    others = {run(llama_backend, temperature=1.0, max_tokens=48, seed=s)[0] for s in (1, 2, 3)}
    assert others - {a}, "different seeds all gave the same text"


def test_max_tokens_is_exact(llama_backend):
    _, chunks = run(llama_backend, temperature=0, max_tokens=7, ignore_eos=True)
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].completion_tokens == 7


def test_stop_string_ends_the_answer_without_leaking(llama_backend):
    full, _ = run(llama_backend, prompt="1, 2, 3, 4, 5, 6,", temperature=0, max_tokens=30, ignore_eos=True)
    assert " 9" in full
    text, chunks = run(llama_backend, prompt="1, 2, 3, 4, 5, 6,", temperature=0, max_tokens=30, stop=[" 9"])
    assert chunks[-1].finish_reason == "stop"
    assert text == full[: full.index(" 9")]
    assert " 9" not in text and not text.endswith(" ")


def test_cancel_mid_stream_finishes_with_cancelled(llama_backend):
    req = GenerationRequest(
        model="starter", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=500, ignore_eos=True)
    )
    seen = []
    for chunk in llama_backend.stream(req):
        seen.append(chunk)
        if len(seen) == 3:
            llama_backend.cancel(req.request_id)
    assert seen[-1].finish_reason == "cancelled"
    assert seen[-1].completion_tokens < 20  # stopped within a token or two, not at 500


def test_closing_the_stream_frees_the_slot(llama_backend):
    req = GenerationRequest(model="s", prompt="Hello", params=SamplingParams(temperature=0, max_tokens=500, ignore_eos=True))
    stream = llama_backend.stream(req)
    next(stream)
    stream.close()
    for _ in range(200):
        if llama_backend.stats()["running"] == 0:
            break
        threading.Event().wait(0.01)
    assert llama_backend.stats()["running"] == 0


def test_prompt_over_the_context_raises_before_generating(llama_backend):
    long_prompt = "word " * 5000
    with pytest.raises(ContextLengthExceeded) as info:
        llama_backend.stream(GenerationRequest(model="s", prompt=long_prompt))
    assert info.value.n_ctx == 2048
    assert info.value.prompt_tokens > 2048


def test_json_schema_output_parses_and_validates(llama_backend):
    import json

    import jsonschema

    from engine.types import ResponseFormat

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    req = GenerationRequest(
        model="s",
        messages=(ChatMessage("user", "Give a person as JSON."),),
        params=SamplingParams(temperature=0, max_tokens=80),
        response_format=ResponseFormat(type="json_schema", schema=schema),
    )
    text = "".join(c.text for c in llama_backend.stream(req))
    jsonschema.validate(json.loads(text), schema)


def test_logprobs_are_reported_per_token(llama_backend):
    _, chunks = run(llama_backend, temperature=0, max_tokens=5, logprobs=3, ignore_eos=True)
    lps = [lp for c in chunks for lp in c.logprobs]
    assert len(lps) == 5
    for lp in lps:
        assert lp.logprob <= 0
        assert len(lp.top) == 3
        assert lp.top[0][1] >= lp.top[1][1] >= lp.top[2][1]
        assert abs(lp.top[0][1] - lp.logprob) < 1e-6  # greedy picks the most likely token


def test_truncated_gguf_is_a_load_error_naming_the_path(tmp_path: Path, starter_path: Path):
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(starter_path.read_bytes()[: 5_000_000])
    backend = LlamaCppBackend()
    with pytest.raises(ModelLoadError) as info:
        backend.load(ModelSpec(name="bad", path=bad))
    assert str(bad) in str(info.value)
    backend.close()


def test_non_gguf_file_is_a_load_error_naming_the_path(tmp_path: Path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("this is not a model")
    backend = LlamaCppBackend()
    with pytest.raises(ModelLoadError) as info:
        backend.load(ModelSpec(name="bad", path=bad))
    assert str(bad) in str(info.value)
    backend.close()
