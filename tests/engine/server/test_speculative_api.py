"""Speculative decoding over the API: OpenAI's `prediction` drafts from the given text and the answer is the
one without it; usage names the drafted tokens as OpenAI does; `speculative: false` turns drafting off in
every dialect; /api/stats counts the drafts."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from engine.server import ServerSettings, create_app
from tests.engine.backends.test_speculative import SOURCE

MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": f"Copy this code exactly, with no comment:\n\n{SOURCE}"}]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    # one thread: the drafted answer is then the plain one to the bit (tests/engine/backends/test_speculative.py)
    manager = ModelManager(registry, options=LoadOptions(n_ctx=1024, n_seq_max=2, n_threads=1))
    with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as client:
        yield client
    manager.close()
    registry.close()


def chat(api, **extra):
    body = {"model": MODEL, "messages": ASK, "max_tokens": 64, "temperature": 0, **extra}
    r = api.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_prediction_drafts_from_the_given_text_and_the_answer_is_the_same(api):
    chat(api, speculative=False)  # the prompt in the prefix cache, as for every request after it
    plain = chat(api, speculative=False)
    assert plain["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0
    assert plain["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] == 0
    predicted = chat(api, speculative=False, prediction={"type": "content", "content": SOURCE})  # the prediction wins
    details = predicted["usage"]["completion_tokens_details"]
    assert predicted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert details["accepted_prediction_tokens"] == 0  # false means no drafts at all
    predicted = chat(api, prediction={"type": "content", "content": [{"type": "text", "text": SOURCE}]})
    details = predicted["usage"]["completion_tokens_details"]
    assert predicted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert details["accepted_prediction_tokens"] > 10 and details["reasoning_tokens"] == 0
    stats = api.get("/api/stats").json()["models"][MODEL]
    assert stats["accepted_draft_tokens"] >= details["accepted_prediction_tokens"] and stats["draft_tokens"] > 0
    metrics = api.get("/metrics").text
    assert f'hearth_accepted_draft_tokens_total{{model="{MODEL}"}} {float(stats["accepted_draft_tokens"])}' in metrics


def test_every_dialect_takes_speculative_false(api):
    r = api.post("/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": ASK, "speculative": False})
    assert r.status_code == 200, r.text
    r = api.post("/v1/responses", json={"model": MODEL, "max_output_tokens": 16, "input": ASK[0]["content"], "speculative": False})
    assert r.status_code == 200, r.text
    r = api.post("/api/chat", json={"model": MODEL, "messages": ASK, "stream": False, "speculative": False, "options": {"num_predict": 8}})
    assert r.status_code == 200, r.text
    r = api.post("/v1/completions", json={"model": MODEL, "prompt": SOURCE, "max_tokens": 8, "speculative": "no"})
    assert r.status_code == 400  # a boolean, not a word


def test_an_answer_cut_by_a_stop_string_counts_only_the_drafted_tokens_it_kept(api):
    """A stop string that ends the answer inside a verified draft: the drafted tokens after it are not part of
    the answer, and usage does not count them as accepted."""
    chat(api, speculative=False)  # the prompt in the prefix cache first, whichever test ran before (see above)
    plain = chat(api, speculative=False)["choices"][0]["message"]["content"]
    stop = plain[len(plain) // 2 :].split()[0]  # a word from the second half of the answer
    cut = chat(api, prediction={"type": "content", "content": SOURCE}, stop=[stop])
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["choices"][0]["message"]["content"] == plain[: plain.index(stop)]
    usage = cut["usage"]
    details = usage["completion_tokens_details"]
    assert 0 < details["accepted_prediction_tokens"] <= usage["completion_tokens"] - 1  # the first is never drafted
    assert details["rejected_prediction_tokens"] >= 0
