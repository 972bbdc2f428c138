"""A generation that fails after it started, through the other dialects: the engine's error, in each
dialect's own shape, plain and streamed (the in-process app of test_generation_failure.py)."""

from __future__ import annotations

import json

import pytest

from tests.engine.server.conftest import MODEL
from tests.engine.server.test_generation_failure import DECODE_ERROR, failing  # noqa: F401 - the fixture

ASK = [{"role": "user", "content": "Name three colours."}]


def test_anthropic_failures_are_api_errors_plain_and_streamed(failing):  # noqa: F811
    client, backend = failing
    backend.mode = "chunk"
    body = {"model": MODEL, "max_tokens": 20, "messages": ASK, "temperature": 0}
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 500
    assert r.json() == {"type": "error", "error": {"type": "api_error", "message": DECODE_ERROR}}
    with client.stream("POST", "/v1/messages", json={**body, "stream": True}) as s:
        lines = list(s.iter_lines())
    events = [line[7:] for line in lines if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "error" and "message_stop" not in events
    assert json.loads(lines[[i for i, line in enumerate(lines) if line == "event: error"][0] + 1][6:])["error"]["message"] == DECODE_ERROR

    backend.mode = "overloaded"  # a full queue: Anthropic's 529 (its 429 is an account's rate limit), with Retry-After
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error" and r.headers["Retry-After"]
    import anthropic

    sdk = anthropic.Anthropic(api_key="x", base_url=str(client.base_url), http_client=client, max_retries=0)
    with pytest.raises(anthropic.OverloadedError):
        sdk.messages.create(model=MODEL, max_tokens=20, messages=ASK)


def test_ollama_failures_are_error_lines(failing):  # noqa: F811
    client, backend = failing
    backend.mode = "chunk"
    body = {"model": MODEL, "messages": ASK, "options": {"num_predict": 20, "temperature": 0}}
    r = client.post("/api/chat", json={**body, "stream": False})
    assert r.status_code == 500 and r.json() == {"error": DECODE_ERROR}
    with client.stream("POST", "/api/chat", json=body) as s:
        lines = [json.loads(line) for line in s.iter_lines() if line]
    assert lines[-1] == {"error": DECODE_ERROR} and not any(line.get("done") for line in lines)


def test_responses_failures_are_server_errors_and_response_failed(failing):  # noqa: F811
    client, backend = failing
    backend.mode = "chunk"
    body = {"model": MODEL, "input": "Name three colours.", "max_output_tokens": 20, "temperature": 0}
    r = client.post("/v1/responses", json=body)
    assert r.status_code == 500 and r.json()["error"]["code"] == "generation_failed"
    assert r.json()["error"]["message"] == DECODE_ERROR
    with client.stream("POST", "/v1/responses", json={**body, "stream": True}) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "failed" and events[-1]["response"]["error"]["message"] == DECODE_ERROR
