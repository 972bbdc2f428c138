"""A generation that fails after it started: the plain answer and the stream carry the engine's error.

The app runs in-process on the starter model's real llama.cpp backend, wrapped (through the model
manager's backend factory) so that its generations fail after a few tokens the ways a backend's do:
an error chunk (a failed decode step), an engine error raised mid-stream, an unexpected exception.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from engine.backends import LoadOptions, create_backend
from engine.errors import Overloaded
from engine.types import GenerationChunk
from tests.engine.server.conftest import MODEL

QUESTION = [{"role": "user", "content": "Name three colours."}]
DECODE_ERROR = "Generation failed: llama_decode returned -3."


class FailingBackend:
    """The real backend, except that each generation fails after its first ``after`` chunks."""

    def __init__(self, real, after: int = 2) -> None:
        self._real = real
        self.after = after
        self.mode = "chunk"

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def stream(self, request):
        inner = self._real.stream(request)

        def failing():
            try:
                for i, chunk in enumerate(inner):
                    if i == self.after:
                        break
                    yield chunk
                else:
                    return
                if self.mode == "chunk":  # what the scheduler sends when a decode step fails
                    yield GenerationChunk(finish_reason="error", error=DECODE_ERROR, completion_tokens=self.after)
                elif self.mode == "overloaded":
                    raise Overloaded("The model is being unloaded; retry the request.", retry_after=2.0)
                else:
                    raise RuntimeError("the KV cache is corrupt")
            finally:
                inner.close()

        return failing()


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    made: list[FailingBackend] = []

    def factory(name: str) -> FailingBackend:
        made.append(FailingBackend(create_backend(name)))
        return made[-1]

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    manager = ModelManager(registry, options=LoadOptions(n_ctx=1024, n_seq_max=2), backend_factory=factory)
    manager.load(MODEL)
    with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as client:
        yield client, made[0]
    manager.close()
    registry.close()


def stream_events(client, path: str, body: dict) -> list[dict]:
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": MODEL, "messages": QUESTION, "max_tokens": 20, "temperature": 0}),
        ("/v1/completions", {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}),
    ],
)
def test_a_failed_decode_step_is_the_same_error_plain_and_streamed(failing, openai_schemas, path, body):
    client, backend = failing
    backend.mode = "chunk"
    r = client.post(path, json=body)
    assert r.status_code == 500
    openai_schemas("ErrorResponse", r.json())
    assert r.json()["error"] == {"message": DECODE_ERROR, "type": "server_error", "param": None, "code": "generation_failed"}

    events = stream_events(client, path, body)
    errors = [e for e in events if "error" in e]
    assert [e["error"] for e in errors] == [r.json()["error"]]


def test_an_engine_error_mid_generation_keeps_its_status(failing, openai_schemas):
    client, backend = failing
    backend.mode = "overloaded"
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 20, "temperature": 0}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2"
    openai_schemas("ErrorResponse", r.json())
    assert r.json()["error"]["message"] == "The model is being unloaded; retry the request."
    assert r.json()["error"]["code"] == "overloaded"
    errors = [e for e in stream_events(client, "/v1/chat/completions", body) if "error" in e]
    assert [e["error"] for e in errors] == [r.json()["error"]]


def test_an_unexpected_exception_mid_generation_says_what_failed(failing, caplog):
    client, backend = failing
    backend.mode = "raise"
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 20, "temperature": 0, "n": 2}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "Generation failed: the KV cache is corrupt."
    assert r.json()["error"]["code"] == "generation_failed"
    assert not [rec for rec in caplog.records if rec.exc_info], "a known failure logs no traceback"
    # the model still answers once the fault is gone
    backend.after = 10**6
    try:
        ok = client.post("/v1/chat/completions", json=body)
    finally:
        backend.after = 2
    assert ok.status_code == 200 and all(c["message"]["content"] for c in ok.json()["choices"])
