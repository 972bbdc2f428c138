"""Speculative decoding: prompt lookup drafts what followed the text's suffix before, adapts to what is kept,
and the llama.cpp loop's verification gives the plain decoding's tokens (greedy and seeded sampling, with
stop strings, logprobs, grammars, several requests at once and the prefix cache), with fewer steps."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.backends.base import LoadOptions, ModelSpec
from engine.backends.speculative import Drafter, NgramIndex, RowCost, SpeculativeOptions, best_length
from engine.errors import InvalidRequest
from engine.types import ChatMessage, GenerationRequest, ResponseFormat, SamplingParams

# A text the answer is asked to repeat: what people do with a local model (edit code, rewrite a document).
SOURCE = '''def fit_report(model, hardware, *, context=4096, slots=1):
    """How a model fits this machine: weights, KV cache and what is left."""
    weights = model.size_bytes
    kv = model.kv_bytes_per_token * context * slots
    free = hardware.ram_available - weights - kv
    return {"weights": weights, "kv": kv, "free": free, "fits": free > 0}
'''
COPY = f"Copy this code exactly, with no comment:\n\n{SOURCE}"


def test_the_index_finds_the_latest_earlier_occurrence_of_the_longest_suffix():
    index = NgramIndex([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], n_min=2, n_max=3)
    assert index.continuation(2) == [7, 5]  # after the latest earlier "1 2 3", not the text's own end
    index.append(7)
    assert index.continuation(3) == [5, 1, 2]
    assert NgramIndex([4, 5, 6], n_min=2, n_max=3).continuation(4) == []  # a suffix seen nowhere before


def test_a_draft_is_as_long_as_pays_for_how_often_drafts_are_kept_and_what_a_row_costs():
    assert best_length(0.9, 0.5, 8) == 3  # a small CPU: a row costs half a step
    assert best_length(0.9, 0.05, 8) == 8  # a GPU: rows are nearly free
    assert best_length(0.5, 0.5, 8) == 0  # half the drafts refused on a CPU: no length beats a plain step
    assert best_length(0.99, 0.5, 8) == 8

    cost = RowCost()
    assert cost.share == 0.5  # the prior, until steps of different sizes were timed
    for rows in [1, 1, 4, 1, 9, 1, 3, 1] * 3:
        cost.add(rows, 0.004 + 0.004 * rows)
    assert abs(cost.share - 0.5) < 1e-6
    for rows in [1, 5, 1, 9] * 60:  # the machine changed: rows became cheap
        cost.add(rows, 0.010 + 0.0005 * rows)
    assert abs(cost.share - 0.0005 / 0.0105) < 0.01


def test_refused_drafts_lower_the_rate_and_pause_drafting_for_doubling_spells():
    drafter = Drafter(list(range(40)) * 2, SpeculativeOptions(max_draft=8))
    assert len(drafter.propose(100, row_cost=0.05)) == 8
    drafter.record(8, 3)  # 4 judged: 3 kept, the fourth refused (the other 4 never judged)
    assert (drafter.tried, drafter.accepted) == (4, 3)
    drafter.record(8, 0)  # refused outright: the next step drafts nothing, then twice as long a pause
    assert drafter.propose(100, row_cost=0.05) == [] and drafter.propose(100, row_cost=0.05)
    drafter.record(4, 0)
    assert drafter.propose(100, 0.05) == [] and drafter.propose(100, 0.05) == [] and drafter.propose(100, 0.05)
    assert drafter.keep_rate == (3 + 3.6) / (6 + 4.0)
    assert len(drafter.propose(100, row_cost=0.5)) == 1  # kept two times in three: one token pays on a CPU
    assert drafter.propose(100, row_cost=1.0) == []  # and none where a row costs a whole step
    assert drafter.propose(0) == []


def test_ngram_mode_drafts_whatever_a_row_costs_and_auto_only_where_it_pays():
    source = list(range(40)) * 2
    auto, ngram = Drafter(source, SpeculativeOptions(mode="auto")), Drafter(source, SpeculativeOptions(mode="ngram"))
    assert auto.propose(100, row_cost=2.0) == []  # a drafted row costing two steps never pays
    assert ngram.propose(100, row_cost=2.0) == list(range(8))  # asked for: drafted all the same
    ngram.record(8, 0)
    assert ngram.propose(100, row_cost=0.0) == []  # refusals still pause it


def test_the_modes_are_parsed_and_a_draft_model_is_named_as_given():
    assert SpeculativeOptions.parse("NGRAM").mode == "ngram"
    assert not SpeculativeOptions.parse("off").enabled
    draft = SpeculativeOptions.parse("Draft:/Models/Tiny.gguf")
    assert (draft.mode, draft.draft_model) == ("draft", "/Models/Tiny.gguf")  # a path keeps its case
    with pytest.raises(InvalidRequest, match="Name the draft model"):
        SpeculativeOptions.parse("draft:")
    with pytest.raises(InvalidRequest, match="use auto, ngram, draft:MODEL or off"):
        SpeculativeOptions.parse("eagle")


def backend_for(starter_path: Path, mode: str, *, slots: int = 1):
    from engine.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend()
    # one thread: a batch's rows are then computed as a lone row is, so speculation is exact to the bit
    options = LoadOptions(n_ctx=1024, n_seq_max=slots, n_threads=1, speculative=SpeculativeOptions(mode=mode))
    backend.load(ModelSpec(name="s", path=starter_path), options)
    return backend


# A backend for each test: the two must hold the same prefix cache, computed in the same order, as a cached
# prefix reused to the token rounds otherwise than a cold prompt.
@pytest.fixture
def plain(starter_path):
    backend = backend_for(starter_path, "off", slots=2)
    yield backend
    backend.close()


@pytest.fixture
def drafting(starter_path):
    # ngram: drafts whatever a step costs on this machine now (auto weighs that, and a busy machine can make
    # drafting not pay); what is drafted is judged the same way in both modes
    backend = backend_for(starter_path, "ngram", slots=2)
    yield backend
    backend.close()


def generate(backend, text: str = COPY, **params):
    options = {"temperature": 0, "max_tokens": 64, **params}
    fmt = options.pop("response_format", ResponseFormat())
    speculative = options.pop("speculative", None)
    request = GenerationRequest(
        model="s", messages=(ChatMessage("user", text),), params=SamplingParams(**options),
        response_format=fmt, speculative=speculative,
    )  # fmt: skip
    chunks = list(backend.stream(request))
    return [t for c in chunks for t in c.token_ids], "".join(c.text for c in chunks), chunks[-1], chunks


def test_greedy_output_is_the_same_token_for_token_with_fewer_steps(plain, drafting):
    tokens, text, final, chunks = generate(drafting, logprobs=2)
    want, want_text, want_final, want_chunks = generate(plain, logprobs=2)
    assert tokens == want and text == want_text and final.finish_reason == want_final.finish_reason
    assert [c.logprobs for c in chunks] == [c.logprobs for c in want_chunks]  # those of the verified tokens
    assert final.draft_tokens > 0 and final.accepted_draft_tokens >= 8  # it copies its input: steps saved
    assert want_final.draft_tokens == 0
    stats = drafting.stats().details
    assert stats["accepted_draft_tokens"] >= final.accepted_draft_tokens


def test_seeded_sampling_draws_the_same_tokens(plain, drafting):
    params = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 7, "repetition_penalty": 1.1}
    assert generate(drafting, **params)[0] == generate(plain, **params)[0]


def test_stop_strings_max_tokens_and_a_grammar_end_where_they_do_without_drafts(plain, drafting):
    stop = {"stop": ("kv_bytes",)}
    assert generate(drafting, **stop)[1] == generate(plain, **stop)[1]
    short = {"max_tokens": 13}
    assert generate(drafting, **short)[0] == generate(plain, **short)[0]
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    fmt = {"response_format": ResponseFormat(type="json_schema", schema=schema), "max_tokens": 64}
    got, want = generate(drafting, **fmt), generate(plain, **fmt)
    assert got[0] == want[0] and got[1].startswith('{')


def test_requests_at_once_each_get_their_plain_tokens_and_false_turns_it_off(plain, drafting):
    texts = (COPY, "Write a short story about a lighthouse keeper.")
    for backend in (plain, drafting):  # both prompts cached in both, so each answer reuses its own prompt alike
        for t in texts:
            generate(backend, t, max_tokens=1)
    want = [generate(plain, t)[0] for t in texts]
    got: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda i=i, t=t: got.__setitem__(i, generate(drafting, t)[0])) for i, t in enumerate(texts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert [got[0], got[1]] == want
    off = generate(drafting, speculative=False)
    assert off[0] == want[0] and off[2].draft_tokens == 0
