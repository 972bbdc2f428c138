"""The requests that stalled every client, sent to a real `hearth serve`: each is a 400 naming its limit,
in every dialect that takes it (docs/api.md, "Limits")."""

from __future__ import annotations

import httpx
import pytest

from engine.limits import MAX_EMBEDDING_INPUTS, MAX_REPETITION, MAX_STOP_LENGTH, MAX_STOP_SEQUENCES
from tests.engine.server.conftest import MODEL

EXPLODING = {"type": "string", "pattern": "^(a{0,50}){0,50}$"}
HELLO = [{"role": "user", "content": "Say hello."}]
TOOL = {"type": "function", "function": {"name": "spell", "parameters": {"type": "object", "properties": {"word": EXPLODING}}}}


def _message(r: httpx.Response) -> str:
    err = r.json()["error"]
    return err if isinstance(err, str) else err["message"]


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.root}{path}", json=body, headers=server.headers, timeout=120)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": EXPLODING}}}),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": EXPLODING}}}),
        ("/v1/responses", {"model": MODEL, "input": "Say hello.", "text": {
            "format": {"type": "json_schema", "name": "x", "schema": EXPLODING}}}),
        ("/v1/messages", {"model": MODEL, "max_tokens": 8, "messages": HELLO, "output_config": {
            "format": {"type": "json_schema", "schema": EXPLODING}}}),
        ("/api/chat", {"model": MODEL, "messages": HELLO, "format": EXPLODING, "stream": False}),
        ("/api/generate", {"model": MODEL, "prompt": "Hi", "format": EXPLODING, "stream": False}),
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "tools": [TOOL], "tool_choice": "required"}),
    ],
    ids=["chat", "completions", "responses", "messages", "ollama-chat", "ollama-generate", "forced-tool"],
)  # fmt: skip
def test_the_exploding_regex_is_a_400_naming_the_limit_in_every_dialect(server, path, body):
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    assert str(MAX_REPETITION) in _message(r)


def test_the_exploding_regex_as_the_openai_error_names_its_field_and_code(server):
    r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": EXPLODING}}})  # fmt: skip
    assert r.json()["error"]["param"] == "response_format" and r.json()["error"]["code"] == "schema_too_complex"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stop": [f"s{i}" for i in range(200_000)]}),
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stop": [f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)]}),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "stop": ["x" * (MAX_STOP_LENGTH + 1)]}),
        ("/v1/messages", {"model": MODEL, "max_tokens": 8, "messages": HELLO,
                          "stop_sequences": [f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)]}),
        ("/api/chat", {"model": MODEL, "messages": HELLO, "stream": False,
                       "options": {"stop": [f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)]}}),
        ("/api/generate", {"model": MODEL, "prompt": "Hi", "stream": False, "options": {"stop": ["x" * (MAX_STOP_LENGTH + 1)]}}),
    ],
    ids=["200k", "openai-count", "openai-length", "anthropic", "ollama-chat", "ollama-generate"],
)  # fmt: skip
def test_stop_lists_over_the_caps_are_a_400_naming_the_limit(server, path, body):
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    message = _message(r)
    assert str(MAX_STOP_SEQUENCES) in message or str(MAX_STOP_LENGTH) in message


def test_sixteen_stops_are_accepted(server):
    stops = [f"zz{i}" for i in range(MAX_STOP_SEQUENCES)]
    r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stop": stops, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"model": MODEL, "input": ["a word"] * (MAX_EMBEDDING_INPUTS + 1)}),
        ("/api/embed", {"model": MODEL, "input": ["a word"] * (MAX_EMBEDDING_INPUTS + 1)}),
    ],
    ids=["openai", "ollama"],
)
def test_more_embedding_inputs_than_the_cap_are_a_400_naming_it(server, path, body):
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    assert str(MAX_EMBEDDING_INPUTS) in _message(r)


def test_more_choices_than_the_models_slots_is_a_400_naming_the_limit(small_server):
    # The small server has two slots: a third choice would wait for the others and hold every client behind it.
    for path, body in (
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "n": 3, "max_tokens": 2}),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "n": 3, "max_tokens": 2}),
    ):
        r = _post(small_server, path, body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "n"
        assert "at most 2 answers at once" in _message(r)
    r = _post(small_server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "n": 2, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200 and len(r.json()["choices"]) == 2


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "max_tokens": 2**63, "stop": ["!", "."]}),
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "max_completion_tokens": 10**9, "stop": ["!", "."],
                                  "stream": True}),
        ("/v1/responses", {"model": MODEL, "input": "Say hello.", "max_output_tokens": 10**9, "stop": ["!", "."]}),
        ("/v1/messages", {"model": MODEL, "max_tokens": 10**9, "messages": HELLO, "stop_sequences": ["!", "."]}),
        ("/api/chat", {"model": MODEL, "messages": HELLO, "stream": False,
                       "options": {"num_predict": 10**9, "stop": ["!", "."]}}),
    ],
    ids=["chat", "chat-streamed", "responses", "messages", "ollama-chat"],
)  # fmt: skip
def test_a_max_tokens_past_the_context_is_capped_to_it_and_the_response_says_so(small_server, path, body):
    r = _post(small_server, path, {**body, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.headers["X-Hearth-Max-Tokens-Cap"] == "512"  # the small server's context


def test_a_max_tokens_within_the_context_is_not_reported(small_server):
    r = _post(small_server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "max_tokens": 512, "temperature": 0, "stop": ["!", "."]})
    assert r.status_code == 200 and "X-Hearth-Max-Tokens-Cap" not in r.headers
