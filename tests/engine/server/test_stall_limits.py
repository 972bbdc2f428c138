"""The requests that stalled every client, sent to a real `hearth serve`: each is a 400 naming its limit,
in every dialect that takes it (docs/api.md, "Limits")."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from engine.limits import (
    MAX_COUNT,
    MAX_COUNTS_TOTAL,
    MAX_EMBEDDING_INPUTS,
    MAX_ENUM_VALUES,
    MAX_PROPERTIES,
    MAX_REPETITION,
    MAX_STOP_LENGTH,
    MAX_STOP_SEQUENCES,
)
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
        # within the guard's count of JSON values (engine.server.guard.MAX_JSON_VALUES), so the stop limit answers
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stop": [f"s{i}" for i in range(90_000)]}),
        ("/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stop": [f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)]}),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "stop": ["x" * (MAX_STOP_LENGTH + 1)]}),
        ("/v1/messages", {"model": MODEL, "max_tokens": 8, "messages": HELLO,
                          "stop_sequences": [f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)]}),
        ("/api/chat", {"model": MODEL, "messages": HELLO, "stream": False,
                       "options": {"stop": [f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)]}}),
        ("/api/generate", {"model": MODEL, "prompt": "Hi", "stream": False, "options": {"stop": ["x" * (MAX_STOP_LENGTH + 1)]}}),
    ],
    ids=["90k", "openai-count", "openai-length", "anthropic", "ollama-chat", "ollama-generate"],
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


# -- the bounds of engine.schema_limits: over one is a 400 and the worker lives; at one, the grammar works ------


def _openai_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


@pytest.mark.parametrize(
    "schema",
    [{"type": "string", "maxLength": 20_000}, {"type": "string", "maxLength": 60_000},
     {"type": "array", "items": {"type": "integer"}, "maxItems": 60_000}],
    ids=["maxLength-20k", "maxLength-60k", "maxItems-60k"],
)  # fmt: skip
@pytest.mark.parametrize("dialect", ["openai", "ollama"])
def test_the_counts_that_killed_the_worker_are_a_400_naming_the_limit(server, schema, dialect):
    if dialect == "openai":
        r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "response_format": _openai_format(schema)})
    else:
        r = _post(server, "/api/chat", {"model": MODEL, "messages": HELLO, "format": schema, "stream": False})
    assert r.status_code == 400, r.text
    assert f"over the limit of {MAX_COUNT};" in _message(r)
    assert server.proc.poll() is None


PREFIX = "option-with-a-shared-prefix-"
AT_THE_LIMITS = {
    "maxLength": {"type": "string", "maxLength": MAX_COUNT},
    "maxItems": {"type": "array", "items": {"type": "integer"}, "maxItems": MAX_COUNT},
    "counts-in-all": {"type": "object", "properties": {f"f{i}": {"type": "string", "maxLength": MAX_COUNT}
                                                       for i in range(MAX_COUNTS_TOTAL // MAX_COUNT)}},
    "properties": {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(MAX_PROPERTIES)}},
    "alternatives": {"anyOf": [{"anyOf": [{"const": f"{i}-{j}"} for j in range(10)]} for i in range(10)]},
    "enum": {"enum": [f"v{i}" for i in range(MAX_ENUM_VALUES)]},
}  # fmt: skip


@pytest.mark.parametrize("schema", list(AT_THE_LIMITS.values()), ids=list(AT_THE_LIMITS))
def test_a_schema_at_each_limit_is_answered(server, schema):
    """A bound the check lets in is one the grammar engine takes (llama.cpp refused maxLength 2,000-10,000 as
    'could not be parsed')."""
    r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "response_format": _openai_format(schema),
                                                "max_tokens": 3, "temperature": 0})  # fmt: skip
    assert r.status_code == 200, r.text


def test_an_enum_sharing_a_long_prefix_answers_one_of_its_values(server):
    values = [f"{PREFIX}{i}" for i in range(400)] + ['with "quotes" and \\ backslash']
    r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Pick one."}],
                                                "response_format": _openai_format({"enum": values}), "max_tokens": 40,
                                                "temperature": 0})  # fmt: skip
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["choices"][0]["message"]["content"]) in values


@pytest.mark.parametrize(
    ("schema", "valid"),
    [({"const": "nul \u0000 and \\"}, lambda v: v == "nul \u0000 and \\"),
     ({"type": "object", "properties": {'a "key"\\': {"const": 1}}, "required": ['a "key"\\']}, lambda v: v == {'a "key"\\': 1})],
    ids=["const", "property-name"],
)  # fmt: skip
def test_escapes_in_constants_and_property_names_are_matched_as_written(server, schema, valid):
    """A NUL in a constant killed the worker (a GBNF escape no token can write); a backslash ended the literal."""
    r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "response_format": _openai_format(schema),
                                                "max_tokens": 24, "temperature": 0})  # fmt: skip
    assert r.status_code == 200, r.text
    assert valid(json.loads(r.json()["choices"][0]["message"]["content"]))


def test_a_grammar_no_token_can_follow_ends_its_request_and_the_worker_lives(server):
    """A class of no character leaves no token to follow the opening quote (a raw NUL, which a JSON string cannot
    hold, did the same): llama.cpp aborted the process."""
    schema = {"type": "string", "pattern": "^[^\\x00-\\U0010FFFF]$"}
    r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "response_format": _openai_format(schema),
                                                "max_tokens": 4, "temperature": 0})  # fmt: skip
    assert r.status_code == 400 and "allows no token" in _message(r), r.text  # the schema is at fault
    assert server.proc.poll() is None
    assert _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "max_tokens": 2}).status_code == 200


# bounded repetitions: an unbounded \S+ let a prompt the prefix cache had read otherwise write emoji to max_tokens
@pytest.mark.parametrize("pattern", [r"^\d{3}-\d{4}$", r"^[\w.]{1,8}@[\w-]{1,8}\.[a-z]{2,3}$", r"^\S{1,4}\s\W$", r'^say "[a-z]{1,4}" \\ [a-z]{1,3}$',
                                     r"^[a-z]{1,4}\n[ \t]{1,2}[a-z]{1,4}$", r'^say "[ -~]{1,6}"$', r"^[a-z]{1,3}]}$"],
                         ids=["phone", "email", "negations", "quotes", "lines", "printable", "brackets"])  # fmt: skip
def test_patterns_with_class_and_punctuation_escapes_are_enforced(server, pattern):
    """llama.cpp's parser knows no \\d, \\w or \\.: such patterns were refused as 'could not be parsed'. A bare ] or }
    held the request forever (the converter looped without advancing)."""
    import re

    schema = {"type": "string", "pattern": pattern}
    r = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "response_format": _openai_format(schema),
                                                "max_tokens": 32, "temperature": 0})  # fmt: skip
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert re.fullmatch(pattern, json.loads(choice["message"]["content"]))
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


def test_more_prompts_than_the_model_runs_and_queues_is_a_400_and_leaves_the_queue_to_others(small_server):
    # Prompts times n past the slots and the queue could never all be taken: each try filled the queue (every other
    # client got a 429) and then gave back a 429 that said the queue was full, on an idle server, forever.
    assert _post(small_server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 1}).status_code == 200
    stats = httpx.get(f"{small_server.root}/api/stats", headers=small_server.headers, timeout=30).json()["models"][MODEL]
    most = stats["slots"] + stats["max_waiting"]
    r = _post(small_server, "/v1/completions", {"model": MODEL, "prompt": ["Hi"] * (most // 2 + 1), "n": 2, "max_tokens": 1})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt" and f"takes at most {most} at once" in _message(r)
    stats = httpx.get(f"{small_server.root}/api/stats", headers=small_server.headers, timeout=30).json()["models"][MODEL]
    assert stats["waiting"] == 0 and stats["running"] == 0
    assert _post(small_server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 1}).status_code == 200


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


def test_an_endless_header_is_a_431_and_the_worker_answers_the_next_client(server):
    """One connection sending a header that never ends grew the worker by its size and slowed every other client."""

    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nx-endless: ")
        try:
            for _ in range(64 * 1024):  # up to 64 MiB, cut off long before
                s.sendall(b"a" * 1024)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b"The request's headers are larger than 64 KiB; send fewer or shorter headers." in answer
    assert httpx.get(f"{server.root}/health", timeout=30).status_code == 200


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/messages", {"model": MODEL, "max_tokens": 2000, "stream": True, "messages": HELLO}),
        ("/v1/messages", {"model": MODEL, "max_tokens": 0, "stream": True, "messages": HELLO}),
        ("/v1/chat/completions", {"model": MODEL, "max_tokens": 2000, "stream": True, "messages": HELLO}),
        ("/v1/responses", {"model": MODEL, "max_output_tokens": 2000, "stream": True, "input": "Hello"}),
        ("/api/chat", {"model": MODEL, "messages": HELLO, "options": {"num_predict": 2000}}),
        ("/completion", {"model": MODEL, "prompt": "Hello", "n_predict": 2000, "stream": True}),
    ],
    ids=["messages", "messages-warm", "chat", "responses", "ollama-chat", "llama-completion"],
)  # fmt: skip
def test_a_stream_whose_client_leaves_at_once_gives_its_slot_and_the_model_back(server, path, body):
    """A client that sends a streamed request and closes before reading a byte: the generation is cancelled and the
    model released, whatever the route was awaiting when the client went (messages read the prompt's size first)."""
    data = json.dumps(body).encode()
    auth = "".join(f"{k}: {v}\r\n" for k, v in server.headers.items())
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
                      f"Content-Length: {len(data)}\r\n\r\n".encode() + data)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        stats = httpx.get(f"{server.root}/api/stats", headers=server.headers, timeout=30).json()
        held = [m["in_use"] for m in stats["loaded"] if m["name"] == MODEL]
        if stats["requests_in_flight"] == 0 and not any(held) and not stats["models"].get(MODEL, {}).get("running"):
            break
        assert time.monotonic() < deadline, stats
        time.sleep(0.1)
