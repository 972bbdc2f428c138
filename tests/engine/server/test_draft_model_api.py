"""A draft model over the API: its drafted and kept tokens are in `usage` as OpenAI names Predicted Outputs', the
answer is the plain one, and a request that asks for drafts from a draft of another vocabulary gets a 400 that
says why."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from engine.server import ServerSettings, create_app
from tests.engine.backends.test_speculative import SOURCE
from tests.engine.server.tiny_vision import MODEL_PATH as VISION_PATH

MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": f"Copy this code exactly, with no comment:\n\n{SOURCE}"}]


@contextmanager
def api_with_draft(home: Path, draft: Path):
    from engine.backends import LoadOptions
    from engine.backends.speculative import SpeculativeOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    registry = ModelRegistry(home)
    # one thread: the drafted answer is then the plain one to the bit (tests/engine/backends/test_speculative.py)
    options = LoadOptions(n_ctx=1024, n_seq_max=1, n_threads=1, speculative=SpeculativeOptions.parse(f"draft:{draft}"))
    manager = ModelManager(registry, options=options)
    try:
        with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as client:
            yield client
    finally:
        manager.close()
        registry.close()


def chat(api, **extra):
    return api.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, "max_tokens": 24, "temperature": 0, **extra})


def test_usage_counts_the_draft_models_tokens_and_the_answer_is_the_plain_one(tmp_path, starter_path):
    with api_with_draft(tmp_path, starter_path) as api:
        plain = chat(api, speculative=False)  # the prompt in the prefix cache, as for the request after it
        plain = chat(api, speculative=False)
        drafted = chat(api)
        assert plain.status_code == drafted.status_code == 200, drafted.text
        assert drafted.json()["choices"][0]["message"]["content"] == plain.json()["choices"][0]["message"]["content"]
        details = drafted.json()["usage"]["completion_tokens_details"]
        assert details["accepted_prediction_tokens"] >= 8
        assert details["rejected_prediction_tokens"] <= details["accepted_prediction_tokens"] // 10
        assert plain.json()["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0


def test_asking_for_drafts_from_a_draft_of_another_vocabulary_says_why(tmp_path):
    with api_with_draft(tmp_path, VISION_PATH) as api:
        r = chat(api, speculative=True)
        assert r.status_code == 400
        message = r.json()["error"]["message"]
        assert "their vocabularies differ" in message and "pick a draft model of the same family" in message
        assert chat(api, max_tokens=4).status_code == 200  # not asked for: the model answers, drafting by prompt lookup
        loaded = api.post("/api/models/load", json={"model": MODEL}).json()  # `hearth load` says why, and fails
        assert "their vocabularies differ" in loaded["draft_refused"] and loaded["state"] == "loaded"
