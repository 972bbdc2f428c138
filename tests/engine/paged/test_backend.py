"""The paged backend through the Backend protocol, with the real starter model: what only the paged
engine has (blocks, its prefix cache, its thread). What every backend must do alike is in
tests/engine/backends/test_conformance.py, which runs the paged engine too."""

from __future__ import annotations

import threading

import pytest

from engine.backends import create_backend
from engine.backends.base import Backend
from engine.errors import InvalidRequest
from engine.types import ChatMessage, GenerationRequest, SamplingParams

QUESTION = (ChatMessage("user", "Name three colours."),)


def run(backend, *, messages=QUESTION, prompt=None, **params):
    req = GenerationRequest(
        model="s", messages=None if prompt else messages, prompt=prompt, params=SamplingParams(**params)
    )
    chunks = list(backend.stream(req))
    return "".join(c.text for c in chunks), chunks


def wait_idle(backend) -> dict:
    for _ in range(500):
        stats = backend.stats().as_dict()
        if stats["running"] == 0 and stats["waiting"] == 0:
            return stats
        threading.Event().wait(0.01)
    return backend.stats().as_dict()


def test_create_backend_gives_a_paged_backend_that_fits_the_protocol(paged_backend):
    from engine.backends.paged import PagedBackend

    assert isinstance(create_backend("paged"), PagedBackend)
    assert isinstance(paged_backend, Backend)


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


def test_closing_the_stream_frees_the_blocks_at_once(paged_backend):
    req = GenerationRequest(model="s", prompt="Hello", params=SamplingParams(temperature=0, max_tokens=500, ignore_eos=True))
    stream = paged_backend.stream(req)
    next(stream)
    assert paged_backend.stats().details["blocks_used"] > 0
    stream.close()
    stats = wait_idle(paged_backend)
    assert stats["running"] == 0 and stats["blocks_used"] == 0


def test_a_repeated_prompt_hits_the_prefix_cache(paged_backend):
    prompt = "The history of the printing press. " * 20
    run(paged_backend, prompt=prompt, temperature=0, max_tokens=2)
    _, chunks = run(paged_backend, prompt=prompt + "Tell me more.", temperature=0, max_tokens=2)
    assert chunks[-1].cached_tokens >= 128
    stats = paged_backend.stats().as_dict()
    assert stats["prefix_cache_hit_rate"] > 0 and stats["blocks_total"] == 640


def test_a_logit_bias_outside_the_vocabulary_is_refused_with_a_clear_error(paged_backend):
    with pytest.raises(InvalidRequest, match="logit_bias"):
        paged_backend.stream(GenerationRequest(model="s", prompt="hi", params=SamplingParams(logit_bias={10**7: 1.0})))


def test_prompt_logprobs_are_refused_with_what_to_do_and_token_prompts_are_read(paged_backend, llama_backend):
    with pytest.raises(InvalidRequest, match="llama.cpp"):
        paged_backend.stream(GenerationRequest(model="s", prompt="hi", params=SamplingParams(prompt_logprobs=1)))
    # a prompt of token ids is read as those tokens; /tokenize and /detokenize read the same vocabulary
    ids = tuple(llama_backend.encode("The sky is", add_special=False, parse_special=True))
    assert paged_backend.encode("The sky is", add_special=False, parse_special=True) == list(ids)
    assert b"".join(paged_backend.token_bytes(ids)) == b"The sky is"
    by_ids = paged_backend.stream(GenerationRequest(model="s", prompt="", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=4)))
    by_text = paged_backend.stream(GenerationRequest(model="s", prompt="The sky is", params=SamplingParams(temperature=0, max_tokens=4)))
    assert [c.text for c in by_ids] == [c.text for c in by_text]


def test_the_engine_thread_loads_the_model_and_load_errors_reach_the_caller(tmp_path, monkeypatch):
    """torch's CPU ops run on an OpenMP team per calling thread: the engine thread that runs the model
    also loads it, so a process with one model has one team (a second slows every decode step)."""
    from engine.backends.base import LoadOptions, ModelSpec, PagedOptions
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
    backend.load(ModelSpec("tiny", tmp_path), LoadOptions(n_ctx=64, paged=PagedOptions(num_kv_blocks=16, device="cpu")))
    try:
        assert threads == [backend.loop._thread.name] and threads[0] != threading.current_thread().name
        steps: list[str] = []
        runner = backend.loaded.engine.runner
        real_run = runner.run
        monkeypatch.setattr(runner, "run", lambda batch: steps.append(threading.current_thread().name) or real_run(batch))
        chunks = list(backend.stream(GenerationRequest(model="tiny", prompt="the", params=SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))))
        assert chunks[-1].finish_reason == "length" and set(steps) == set(threads)
    finally:
        backend.close()
    broken = PagedBackend()
    with pytest.raises(ModelLoadError):
        broken.load(ModelSpec("missing", tmp_path / "missing"), LoadOptions())
    assert broken.loop is None and broken.loaded is None


def test_a_full_queue_refuses_a_request_and_unloading_cancels_the_rest(tmp_path):
    """The paged engine admits through the queue every backend shares: requests waiting in its
    scheduler count toward the bound, and closing ends every stream with its final chunk."""
    from engine.backends.base import LoadOptions, ModelSpec, PagedOptions
    from engine.backends.paged import PagedBackend
    from engine.errors import Overloaded

    from .test_models import make_checkpoint

    make_checkpoint(tmp_path, "LlamaConfig", {"max_position_embeddings": 4096})
    backend = PagedBackend()
    options = LoadOptions(n_ctx=4096, n_seq_max=1, max_waiting=1, paged=PagedOptions(num_kv_blocks=512, device="cpu"))
    backend.load(ModelSpec("tiny", tmp_path), options)
    try:
        def long_request() -> GenerationRequest:  # runs to the end of the context: thousands of steps
            return GenerationRequest(model="tiny", prompt="the", params=SamplingParams(ignore_eos=True))

        first = backend.stream(long_request())
        next(first)
        second = backend.stream(long_request())  # one slot: it waits in the scheduler
        for _ in range(500):
            if backend.stats().waiting == 1 and not backend.loop._waiting:
                break
            threading.Event().wait(0.01)
        with pytest.raises(Overloaded, match="^1 request is already waiting for this model"):
            backend.stream(long_request())
        assert backend.stats().running == 1
    finally:
        backend.close()
    assert list(first)[-1].finish_reason == "cancelled"
    assert list(second)[-1].finish_reason == "cancelled"


# A batch of rows rounds otherwise than one row, so a drafted step may flip a greedy pick where the plain run's
# two best tokens are this close (in log-probability); anywhere else the answers must be the same.
NEAR_TIE = 0.01
SOURCE = '''def fit_report(model, hardware, *, context=4096, slots=1):
    """How a model fits this machine: weights, KV cache and what is left."""
    weights = model.size_bytes
    kv = model.kv_bytes_per_token * context * slots
    free = hardware.ram_available - weights - kv
    return {"weights": weights, "kv": kv, "free": free, "fits": free > 0}
'''


def same_up_to_a_near_tie(drafted: list, plain: list) -> None:
    """Both runs' chunks give the same tokens, or part at a place where the plain run's top two were a near-tie."""
    got = [(t, lp) for c in drafted for t, lp in zip(c.token_ids, c.logprobs, strict=True)]
    want = [(t, lp) for c in plain for t, lp in zip(c.token_ids, c.logprobs, strict=True)]
    for i, ((token, _), (wanted, lp)) in enumerate(zip(got, want, strict=False)):
        if token != wanted:
            gap = lp.top[0][1] - lp.top[1][1]
            assert gap < NEAR_TIE, f"token {i} differs where the plain run's best two were {gap:.4f} apart"
            return
    assert len(got) == len(want)


def test_drafts_from_a_prediction_give_the_plain_greedy_tokens_with_their_logprobs(paged_backend):
    copy = (ChatMessage("user", f"Copy this code exactly, with no comment:\n\n{SOURCE}"),)
    run(paged_backend, messages=copy, temperature=0, max_tokens=1)  # both runs then reuse one cached prompt

    def answer(**fields):
        request = GenerationRequest(model="s", messages=copy, params=SamplingParams(temperature=0, max_tokens=48, logprobs=2),
                                    **fields)  # fmt: skip
        return list(paged_backend.stream(request))

    before = paged_backend.stats().details
    plain = answer(speculative=False)
    drafted = answer(prediction=SOURCE)  # drafted from whatever a row costs
    same_up_to_a_near_tie(drafted, plain)
    assert plain[-1].draft_tokens == 0 and plain[-1].finish_reason == drafted[-1].finish_reason
    final = drafted[-1]
    assert final.draft_tokens >= final.accepted_draft_tokens >= 16  # it copies: a third of the steps saved at least
    assert final.completion_tokens == plain[-1].completion_tokens
    after = paged_backend.stats().details
    assert after["draft_tokens"] - before["draft_tokens"] == final.draft_tokens
    assert after["accepted_draft_tokens"] - before["accepted_draft_tokens"] == final.accepted_draft_tokens
    assert wait_idle(paged_backend)["blocks_used"] == 0


def test_drafted_answers_follow_a_grammar_and_end_at_a_stop_string_as_plain_ones_do(paged_backend):
    from engine.types import ResponseFormat

    copy = (ChatMessage("user", f"Copy this code exactly, with no comment:\n\n{SOURCE}"),)
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    cases = [  # (seeded draws and penalties: tests/engine/paged/test_speculation.py)
        {"stop": ("size_bytes",), "max_tokens": 40},
        {"response_format": ResponseFormat(type="json_schema", schema=schema), "max_tokens": 24},
    ]
    for case in cases:
        fields = dict(case)
        fmt = fields.pop("response_format", ResponseFormat())
        params = SamplingParams(**{"temperature": 0, **fields})
        answers = [
            list(paged_backend.stream(GenerationRequest(model="s", messages=copy, params=params, response_format=fmt, **extra)))
            for extra in ({"speculative": False}, {"prediction": SOURCE})
        ]  # fmt: skip
        plain, drafted = ("".join(c.text for c in chunks) for chunks in answers)
        assert drafted == plain, case
        assert answers[1][-1].draft_tokens > 0 and answers[1][-1].finish_reason == answers[0][-1].finish_reason, case
        if "stop" in case:
            assert answers[0][-1].finish_reason == "stop" and plain.endswith("model.")
    assert plain.startswith('{"code"')
