"""No request can stall the llama.cpp loop: a grammar past its step budget ends alone, and a long
embedding list interleaves with the decode steps and stops when its caller goes."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import LlamaCppOptions, LoadOptions, ModelSpec
from engine.backends.llamacpp import LlamaCppBackend
from engine.errors import RequestCancelled
from engine.types import ChatMessage, GenerationRequest, ResponseFormat, SamplingParams


@pytest.fixture(scope="module")
def tiny_budget_backend(starter_path: Path):
    """The starter with a grammar budget no mask can meet."""
    backend = LlamaCppBackend()
    options = LoadOptions(n_ctx=512, n_seq_max=2, llamacpp=LlamaCppOptions(grammar_mask_budget=0.0))
    backend.load(ModelSpec(name="smollm2-135m-instruct", path=starter_path), options)
    yield backend
    backend.close()


def test_a_grammar_past_its_step_budget_ends_its_request_with_an_error_and_the_other_goes_on(tiny_budget_backend):
    # A sampled (not greedy) draw the grammar refuses masks the whole vocabulary: with no budget, the
    # request ends with an error that says what to do, while a free-text request beside it answers.
    schema = {"type": "string", "enum": ["zqxj zqxj zqxj"]}
    constrained = GenerationRequest(
        model="s",
        messages=(ChatMessage("user", "Say hello."),),
        params=SamplingParams(temperature=1.0, seed=3, max_tokens=16),
        response_format=ResponseFormat(type="json_schema", schema=schema),
    )
    free = GenerationRequest(
        model="s", prompt="The sky is", params=SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    )
    box: list = []
    other = threading.Thread(target=lambda: box.append(list(tiny_budget_backend.stream(free))))
    other.start()
    final = list(tiny_budget_backend.stream(constrained))[-1]
    other.join(timeout=60)
    assert final.finish_reason == "error"
    assert final.error and "schema" in final.error and final.error_code == "schema_too_complex"
    # the request's own schema is at fault: a 400 through the port, not a server error
    from types import SimpleNamespace

    from engine.errors import SchemaTooComplex
    from engine.server.generation import Generation

    failure = Generation.failure(SimpleNamespace(failures={}), 0, final)  # type: ignore[arg-type]
    assert isinstance(failure, SchemaTooComplex) and failure.status == 400
    assert box and box[0][-1].finish_reason == "length" and box[0][-1].completion_tokens == 8


def test_a_long_embedding_list_lets_a_chat_finish_first_and_stops_when_its_caller_goes(llama_backend):
    started = threading.Event()
    gone = threading.Event()

    def cancelled() -> bool:  # asked before each slice of the list
        started.set()
        return gone.is_set()

    outcome: list = []

    def embed() -> None:
        try:
            outcome.append(llama_backend.embed([f"passage {i} about rivers" for i in range(3000)], cancelled=cancelled))
        except RequestCancelled as exc:
            outcome.append(exc)

    embedder = threading.Thread(target=embed)
    embedder.start()
    assert started.wait(timeout=60)
    chat = GenerationRequest(
        model="s", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    )
    chunks = list(llama_backend.stream(chat))
    still_embedding = embedder.is_alive()
    gone.set()
    embedder.join(timeout=60)
    assert chunks[-1].finish_reason == "length" and chunks[-1].completion_tokens == 8
    assert still_embedding  # the chat did not wait for 3,000 embeddings
    assert len(outcome) == 1 and isinstance(outcome[0], RequestCancelled)  # and the list stopped when asked


def _one_call_embedding(model, tokens: list[int]):
    """llama.cpp's own mean pooling of ``tokens`` in a single call: what an embedding was before it was sliced."""
    import llama_cpp
    import numpy as np

    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = len(tokens)
    params.embeddings = True
    params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_MEAN
    params.n_threads = params.n_threads_batch = 2
    ctx = llama_cpp.llama_init_from_model(model.model_ptr, params)
    batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, i, 1, True
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(tokens)
        assert llama_cpp.llama_decode(ctx, batch) == 0
        vec = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_seq(ctx, 0), shape=(model.n_embd,)).astype(np.float64)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
    return vec / np.linalg.norm(vec)


def test_a_chat_answers_between_two_slices_of_one_long_embedding_input(llama_backend):
    # One text longer than a slice (256 tokens at most) is computed in several calls on the decode thread, the
    # KV cache holding the ones before: a chat runs to its end between two of them (the embedding waits, asked
    # whether its caller is still there, until the chat is done), and the vector is the one a single call gives.
    import numpy as np

    text = " ".join(f"the river {i % 10} runs to the sea" for i in range(45))
    tokens = llama_backend.model.tokenize_prompt(text)
    assert 300 < len(tokens) < 400
    asked = 0
    between = threading.Event()
    chat_done = threading.Event()

    def cancelled() -> bool:  # asked before each slice
        nonlocal asked
        asked += 1
        if asked == 2:  # one slice done, the text not yet
            between.set()
            chat_done.wait(timeout=120)
        return False

    box: list = []
    embedder = threading.Thread(target=lambda: box.append(llama_backend.embed([text], cancelled=cancelled)))
    embedder.start()
    try:
        assert between.wait(timeout=60), "the text was embedded in one call"
        chat = GenerationRequest(
            model="s", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        )
        final = list(llama_backend.stream(chat))[-1]
        assert final.finish_reason == "length" and final.completion_tokens == 8
    finally:
        chat_done.set()
        embedder.join(timeout=120)
    vectors, n_tokens = box[0]
    assert n_tokens == len(tokens) and asked >= 3
    assert float(np.dot(vectors[0], _one_call_embedding(llama_backend.model, tokens))) > 0.9999


def test_a_model_whose_template_recurses_without_end_is_a_load_error(starter_path: Path, tmp_path: Path):
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    from engine.errors import ModelLoadError

    hostile = tmp_path / "recursive-template.gguf"
    reader = gguf.GGUFReader(starter_path, "r")
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(hostile, arch=arch, endianess=reader.endianess)
    template = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    copy_with_new_metadata(reader, writer, {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, template)}, [])
    backend = LlamaCppBackend()
    with pytest.raises(ModelLoadError, match="recursed") as err:
        backend.load(ModelSpec(name="hostile", path=hostile), LoadOptions(n_ctx=256, n_seq_max=1))
    assert str(hostile) in str(err.value)
    backend.close()


def test_a_cancelled_request_stops_masking_between_two_slices(starter_path: Path):
    # One llama.cpp mask call cannot be interrupted, so the vocabulary is masked in slices with the
    # request's cancellation asked before each: a cancel seen before the third slice ends the draw there.
    import time

    from engine.backends.llamacpp.model import GGUFModel
    from engine.backends.llamacpp.sampler import MASK_SLICE, SequenceSampler, _Budget

    model = GGUFModel(starter_path)
    sampler = SequenceSampler(model, SamplingParams(temperature=1.0, seed=1), 'root ::= "zqxj"')
    try:
        asked = []

        def cancelled() -> bool:
            asked.append(1)
            return len(asked) >= 3

        assert model.n_vocab > 3 * MASK_SLICE
        sampler._view["id"] = sampler._ids
        sampler._view["logit"] = 1.0
        with pytest.raises(RequestCancelled):
            sampler._mask(sampler.grammar, model.n_vocab, _Budget(time.perf_counter(), 60.0, cancelled))
        assert len(asked) == 3
        masked = sampler._view["logit"] == float("-inf")
        assert masked[: 2 * MASK_SLICE].sum() > 0.99 * 2 * MASK_SLICE  # the two slices before the cancel
        assert not masked[2 * MASK_SLICE :].any()  # and nothing after it
    finally:
        sampler.close()
        model.close()


def test_a_chat_gets_a_slot_from_a_request_whose_choices_hold_them_all_and_the_choice_goes_on(llama_backend):
    # Four greedy choices of one request fill the four slots; a chat that comes after them takes one of their
    # slots at once and ends first. The choice that gave its slot up goes on where it was: same answer as the others.
    slots = llama_backend.loop.n_seq_max
    paused = llama_backend.stats().details.get("paused_sequences", 0)
    choices = [
        GenerationRequest(
            model="s", prompt="Write a long story about a dragon.", group="n-choices",
            params=SamplingParams(temperature=0, max_tokens=48, ignore_eos=True),
        )  # fmt: skip
        for _ in range(slots)
    ]
    streams = [llama_backend.stream(r) for r in choices]
    firsts = [next(s) for s in streams]  # every choice is decoding: no slot is free
    assert llama_backend.stats().running == slots
    ended: list[str] = []
    answers: list[list] = [[] for _ in choices]

    def drain(i: int) -> None:
        answers[i] = [firsts[i], *streams[i]]
        ended.append(f"choice {i}")

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(slots)]
    for t in threads:
        t.start()
    chat = GenerationRequest(
        model="s", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    )
    final = list(llama_backend.stream(chat))[-1]
    ended.append("chat")
    for t in threads:
        t.join(timeout=120)
    assert final.finish_reason == "length" and final.completion_tokens == 4
    assert ended[0] == "chat", ended  # it waited for no choice to end
    assert llama_backend.stats().details["paused_sequences"] == paused + 1
    ids = [[t for c in a for t in c.token_ids] for a in answers]
    assert all(a[-1].finish_reason == "length" and a[-1].completion_tokens == 48 for a in answers)
    assert all(i == ids[0] for i in ids), "a choice that gave up its slot went on differently"


def test_short_texts_go_in_together_and_each_embeds_as_it_does_alone(llama_backend):
    """Many short texts (a search index's passages) are packed into few llama.cpp calls, each text its own
    sequence: every vector is the one the text gets alone, in the order given."""
    from engine.backends.llamacpp.embedding import Embedder

    texts = [f"note {i}: the {'river' if i % 2 else 'mountain'} is {i * 7} metres away" for i in range(24)]
    alone = [llama_backend.embed([t])[0][0] for t in texts[:4]]
    # calls as long as a slow machine's: packs as large as a fast one makes of these texts in a tenth of a second
    embedder = Embedder(llama_backend.model, llama_backend.loop, idle_call_seconds=30.0)
    try:
        vectors, n_tokens = embedder.embed(texts)
    finally:
        embedder.close()
    assert len(vectors) == len(texts) and n_tokens > len(texts)
    assert embedder.slices <= 3, f"{embedder.slices} calls for {len(texts)} short texts"
    for i, vec in enumerate(alone):
        assert float(np.dot(vec, vectors[i])) > 0.9999, i
    assert float(np.dot(vectors[0], vectors[1])) < 0.9999  # different texts, different vectors
