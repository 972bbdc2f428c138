"""The local API against the official `openai` client and OpenAI's own schemas."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from engine.tools.spec import close_partial_json
from tests.engine.server.conftest import MODEL

QUESTION = [{"role": "user", "content": "Name three colours."}]


def reference_prompt_tokens(starter_path, messages) -> int:
    """Prompt tokens counted independently: the GGUF's template rendered and tokenized by raw llama-cpp-python."""
    import llama_cpp

    from engine.chat_template import ChatTemplate
    from engine.types import as_messages

    llm = llama_cpp.Llama(model_path=str(starter_path), vocab_only=True, verbose=False)
    template = ChatTemplate(llm.metadata.get("tokenizer.chat_template"))
    text = template.render(as_messages(messages))
    return len(llm.tokenize(text.encode(), add_bos=False, special=True))


def test_models_list_validates(server, openai_schemas):
    raw = httpx.get(f"{server.base_url}/models", headers=server.headers).json()
    openai_schemas("ListModelsResponse", raw)
    ids = [m.id for m in server.client().models.list()]
    assert MODEL in ids
    one = httpx.get(f"{server.base_url}/models/{MODEL}", headers=server.headers).json()
    openai_schemas("Model", one)
    assert one == next(m for m in raw["data"] if m["id"] == MODEL)  # retrieve says what the list says


def test_chat_completion_with_exact_usage(server, openai_schemas, starter_path):
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 20, "temperature": 0, "logprobs": True}
    raw = httpx.post(f"{server.base_url}/chat/completions", json=body, headers=server.headers, timeout=60).json()
    openai_schemas("CreateChatCompletionResponse", raw)
    choice = raw["choices"][0]
    assert choice["message"]["content"]
    assert raw["usage"]["completion_tokens"] == len(choice["logprobs"]["content"])
    assert raw["usage"]["prompt_tokens"] == reference_prompt_tokens(starter_path, QUESTION)
    assert raw["usage"]["total_tokens"] == raw["usage"]["prompt_tokens"] + raw["usage"]["completion_tokens"]

    client = server.client()
    resp = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=20, temperature=0)
    assert resp.choices[0].message.content == choice["message"]["content"]
    assert resp.choices[0].finish_reason in ("stop", "length")


def test_streamed_chat_chunks_validate_and_match_non_streamed(server, openai_schemas):
    body = {
        "model": MODEL,
        "messages": QUESTION,
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = []
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, headers=server.headers, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for c in chunks:
        openai_schemas("CreateChatCompletionStreamResponse", c)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []

    plain = server.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=24, temperature=0)
    assert text == plain.choices[0].message.content
    # The same usage either way, details included; only the cache hit differs (the second run reuses the prefix).
    # How many tokens were drafted depends on what a drafted row costs this machine at that moment (--speculative
    # auto measures it), so those two counts may differ; the answer and the other counts may not.
    expected = plain.usage.model_dump(exclude_none=True)
    expected["prompt_tokens_details"] = usage["prompt_tokens_details"]
    assert set(usage["completion_tokens_details"]) == {"reasoning_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens"}
    for counts in (usage["completion_tokens_details"], expected["completion_tokens_details"]):
        assert all(isinstance(counts.pop(k), int) for k in ("accepted_prediction_tokens", "rejected_prediction_tokens"))
    assert usage == expected and usage["completion_tokens_details"]["reasoning_tokens"] == 0

    # the openai client's own stream parser agrees
    stream = server.client().chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=24, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    parts, last = [], None
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        last = chunk
    assert "".join(parts) == text
    assert last.usage.completion_tokens == plain.usage.completion_tokens


def test_completions_plain_and_streamed(server, openai_schemas):
    body = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "logprobs": 2}
    raw = httpx.post(f"{server.base_url}/completions", json=body, headers=server.headers, timeout=60).json()
    openai_schemas("CreateCompletionResponse", raw)
    lp = raw["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == raw["usage"]["completion_tokens"] == len(lp["token_logprobs"])
    assert "".join(lp["tokens"]) == raw["choices"][0]["text"]

    events = []
    with httpx.stream(
        "POST", f"{server.base_url}/completions", json={**body, "stream": True}, headers=server.headers, timeout=60
    ) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    # The spec shares one shape between streamed and plain completions, with a non-null
    # finish_reason; OpenAI's own streams send null until the last chunk, and so do we.
    # Every chunk validates once that one field is given its final value.
    for c in chunks:
        choice = c["choices"][0]
        openai_schemas("CreateCompletionResponse", {**c, "choices": [{**choice, "finish_reason": choice["finish_reason"] or "stop"}]})
    openai_schemas("CreateCompletionResponse", chunks[-1])
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert "".join(c["choices"][0]["text"] for c in chunks) == raw["choices"][0]["text"]

    # the prompt again: read from the cache, and both answers say how much of it was
    with httpx.stream("POST", f"{server.base_url}/completions", headers=server.headers, timeout=60,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}}) as r:  # fmt: skip
        usage = json.loads([line[6:] for line in r.iter_lines() if line.startswith("data: {")][-1])["usage"]
    again = httpx.post(f"{server.base_url}/completions", json=body, headers=server.headers, timeout=60).json()
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached < again["usage"]["prompt_tokens"] and cached == usage["prompt_tokens_details"]["cached_tokens"]


def test_an_empty_or_null_prompt_is_answered_from_the_start_of_a_document_with_the_sdk(server):
    """OpenAI's default prompt is its end-of-text token; Hearth starts from the model's BOS (SmolLM2's <|im_start|>)."""
    client = server.client()
    start = client.completions.create(model=MODEL, prompt="<|im_start|>", max_tokens=6, temperature=0)
    for prompt in ("", "\x1d", None):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0}
        raw = httpx.post(f"{server.base_url}/completions", json=body, headers=server.headers, timeout=60)
        assert raw.status_code == 200, raw.text
        assert raw.json()["choices"][0]["text"] == start.choices[0].text
        assert raw.json()["usage"]["prompt_tokens"] == 1
    assert client.completions.create(model=MODEL, prompt="", max_tokens=6, temperature=0).choices[0].text == start.choices[0].text


def test_n_choices_and_usage(server):
    resp = server.client().chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=10, temperature=1.0, seed=3, n=3
    )
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert resp.usage.completion_tokens >= 3


def test_stop_sequence(server):
    client = server.client()
    full = client.completions.create(model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=20, temperature=0).choices[0].text
    assert " 8" in full
    cut = client.completions.create(model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=20, temperature=0, stop=[" 8"])
    assert cut.choices[0].text == full[: full.index(" 8")]
    assert cut.choices[0].finish_reason == "stop"


def test_seed_determinism(server):
    client = server.client()
    kw = dict(model=MODEL, messages=QUESTION, max_tokens=30, temperature=1.0, seed=42)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_json_schema_output_parses_and_validates(server):
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["colour", "count"],
        "additionalProperties": False,
    }
    resp = server.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Give a colour and a count as JSON."}],
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(resp.choices[0].message.content), schema)
    obj = server.client().chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=60, temperature=0, response_format={"type": "json_object"}
    )
    text = obj.choices[0].message.content or ""
    if obj.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # the tiny model may nest objects until the limit (its greedy path turns on near ties, which the
        # batch it shares the server with moves): what the grammar holds is an object that is still open
        assert obj.choices[0].finish_reason == "length" and isinstance(json.loads(close_partial_json(text)), dict), text



def test_embeddings_validate(server, openai_schemas):
    raw = httpx.post(
        f"{server.base_url}/embeddings", json={"model": MODEL, "input": ["red", "blue"]}, headers=server.headers, timeout=60
    ).json()
    openai_schemas("CreateEmbeddingResponse", raw)
    assert len(raw["data"]) == 2 and len(raw["data"][0]["embedding"]) > 100
    resp = server.client().embeddings.create(model=MODEL, input="hello")
    assert abs(sum(x * x for x in resp.data[0].embedding) - 1.0) < 1e-3
    # token ids (LangChain's OpenAIEmbeddings sends tiktoken's by default): a 400 that says how to send texts
    for ids in ([[504, 3575]], [504, 3575]):
        r = httpx.post(f"{server.base_url}/embeddings", json={"model": MODEL, "input": ids}, headers=server.headers, timeout=60)
        assert r.status_code == 400 and "check_embedding_ctx_length=False" in r.json()["error"]["message"]
    r = httpx.post(f"{server.base_url}/embeddings", json={"model": MODEL, "input": ["a", ""]}, headers=server.headers, timeout=60)
    assert r.json()["error"]["message"] == "'input' must be a non-empty text or a list of non-empty texts."


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "no-such-model", "messages": QUESTION}, 404, "model"),
        ({"model": MODEL, "messages": QUESTION, "temperature": -1}, 400, "temperature"),
        ({"model": MODEL, "messages": QUESTION, "max_tokens": 0}, 400, "max_tokens"),
        ({"model": MODEL, "messages": []}, 400, "messages"),
        ({"model": MODEL, "messages": "hello"}, 400, "messages"),
        ({"model": MODEL, "messages": QUESTION, "temperature": "hot"}, 400, "temperature"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
        ({"model": MODEL, "messages": QUESTION, "n": 0}, 400, "n"),
        ({"messages": QUESTION}, 400, "model"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "word " * 3000}]}, 400, "messages"),
    ],
)
def test_errors_are_openai_shaped(server, openai_schemas, body, status, param):
    r = httpx.post(f"{server.base_url}/chat/completions", json=body, headers=server.headers, timeout=60)
    assert r.status_code == status, r.text
    openai_schemas("ErrorResponse", r.json())
    err = r.json()["error"]
    assert err["param"] == param
    assert err["message"].endswith(".")


def test_context_overflow_has_its_code(server):
    with pytest.raises(openai.BadRequestError) as info:
        server.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 3000}])
    assert info.value.code == "context_length_exceeded"


def test_an_overflow_on_completions_is_told_in_openais_words(server):
    """LiteLLM (and others) tell a context overflow by OpenAI's words, "This model's maximum context length is",
    into the error its context-window fallbacks catch; the openai SDK's message holds the body's message alone."""
    long = "word " * 3000
    asked = {"/chat/completions": {"messages": [{"role": "user", "content": long}]}, "/completions": {"prompt": long}}
    for path, body in asked.items():
        r = httpx.post(f"{server.base_url}{path}", json={"model": MODEL, "max_tokens": 4, **body}, headers=server.headers, timeout=60)
        message = r.json()["error"]["message"]
        assert r.status_code == 400 and message.startswith("This model's maximum context length is 2048 tokens."), message
        assert "--ctx" in message


def test_an_overflow_names_the_field_that_holds_the_prompt(server):
    """The SDK's error says which field to shorten: a completion's prompt, an embedding's or a response's input."""
    client = server.client()
    long = "word " * 3000
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt=long, max_tokens=4)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "prompt")
    assert "shorten the prompt" in info.value.message and "conversation" not in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MODEL, input=["a short one", long])
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "input")
    assert "An input is" in info.value.message and MODEL in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long}])
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "messages")
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input=long)
    assert (info.value.code, info.value.param) == ("context_length_exceeded", "input")


@pytest.mark.parametrize(
    "raw",
    [b"{bad json", b"", b"[]", b"null", b'{"model": 5, "messages": 7}', b'{"model": "x", "prompt": {"a": 1}}', b"\xff\xfe"],
)
def test_malformed_bodies_never_give_500(server, raw):
    for path in ("/chat/completions", "/completions", "/embeddings"):
        r = httpx.post(
            f"{server.base_url}{path}", content=raw, headers={**server.headers, "content-type": "application/json"}
        )
        assert 400 <= r.status_code < 500, (path, raw, r.status_code, r.text)
        assert "error" in r.json()
    assert httpx.get(f"{server.root}/health").status_code == 200


def test_a_body_that_is_no_json_object_is_told_what_to_send(server):
    body = b'{"model": "x", "messages": [{"role": "user", "content": "hi"}]}'
    for raw, headers in ((body, {}), (body, {"content-type": "text/plain"}), (b"[1]", {"content-type": "application/json"})):
        r = httpx.post(f"{server.base_url}/chat/completions", content=raw, headers={**server.headers, **headers})
        assert r.status_code == 400 and r.json()["error"]["message"] == (
            "The request body must be a JSON object, sent with the header Content-Type: application/json.")


def test_oversized_body_is_refused(server):
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        content=b'{"model": "x", "messages": [], "pad": "' + b"x" * (9 * 1024 * 1024) + b'"}',
        headers={**server.headers, "content-type": "application/json"},
    )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"


def test_api_key_is_enforced_everywhere_but_health(server):
    for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/metrics"), ("GET", "/api/models")]:
        r = httpx.request(method, f"{server.root}{path}", json={})
        assert r.status_code == 401, path
        assert r.json()["error"]["code"] == "invalid_api_key"
        r = httpx.request(method, f"{server.root}{path}", json={}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
    assert httpx.get(f"{server.root}/health").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0).models.list()


def test_cors_is_off_by_default(server):
    r = httpx.options(
        f"{server.base_url}/models",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in r.headers


def test_metrics_and_health(server):
    server.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
    text = httpx.get(f"{server.root}/metrics", headers=server.headers).text
    for name in (
        "hearth_requests_running",
        "hearth_requests_waiting",
        "hearth_time_to_first_token_seconds_bucket",
        "hearth_inter_token_latency_seconds_bucket",
        "hearth_prompt_tokens_total",
        "hearth_generation_tokens_total",
    ):
        assert name in text
    assert httpx.get(f"{server.root}/health").json()["status"] == "ok"


def test_admin_api_lists_and_reports_load_state(server):
    # the session's server is shared: a test elsewhere may have unloaded the model (keep_alive 0, an unload)
    server.client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1)
    models = httpx.get(f"{server.root}/api/models", headers=server.headers).json()["models"]
    starter = next(m for m in models if m["name"] == MODEL)
    assert starter["state"] == "loaded"
    assert starter["format"] == "gguf"
    stats = httpx.get(f"{server.root}/api/stats", headers=server.headers).json()
    assert MODEL in stats["models"]
    assert stats["models"][MODEL]["slots"] == 8


def stream_chunks(server, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{server.base_url}{path}", json=body, headers=server.headers, timeout=60) as r:
        assert r.status_code == 200, r.read()
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_streamed_chunks_leave_out_logprobs_unless_asked_and_every_chunk_validates(server, openai_schemas):
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 12, "temperature": 0, "stream": True, "n": 2}
    chunks = stream_chunks(server, "/chat/completions", body)
    for c in chunks:
        openai_schemas("CreateChatCompletionStreamResponse", c)
        for choice in c["choices"]:
            assert "logprobs" not in choice, c
    assert {c["choices"][0]["index"] for c in chunks} == {0, 1}

    asked = stream_chunks(server, "/chat/completions", {**body, "logprobs": True, "top_logprobs": 2})
    with_tokens = [c for c in asked if c["choices"][0]["delta"].get("content")]
    assert with_tokens
    for c in asked:
        openai_schemas("CreateChatCompletionStreamResponse", c)
    for c in with_tokens:
        assert len(c["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 2


def nullable_fields(spec: dict, component: str) -> list[str]:
    """The request fields OpenAI's spec marks nullable (either way it spells it)."""
    schema = spec["components"]["schemas"][component]
    parts = schema.get("allOf", [schema])
    props = {}
    for part in parts:
        if "$ref" in part:
            part = spec["components"]["schemas"][part["$ref"].rsplit("/", 1)[1]]
            parts.extend(part.get("allOf", []))
        props.update(part.get("properties", {}))

    def nullable(node: dict) -> bool:
        if node.get("nullable") is True or node.get("type") == "null":
            return True
        if "$ref" in node:
            return nullable(spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]])
        return any(nullable(alt) for alt in node.get("anyOf", []) + node.get("oneOf", []))

    return sorted(name for name, node in props.items() if nullable(node))


@pytest.mark.parametrize(
    ("path", "component", "body"),
    [
        ("/chat/completions", "CreateChatCompletionRequest", {"model": MODEL, "messages": QUESTION, "max_tokens": 4}),
        ("/completions", "CreateCompletionRequest", {"model": MODEL, "prompt": "Hello", "max_tokens": 4}),
    ],
)
def test_every_nullable_field_takes_an_explicit_null(server, openai_spec, openai_schemas, path, component, body):
    fields = nullable_fields(openai_spec, component)
    assert {"n", "logprobs", "temperature", "stream", "stop"} <= set(fields)
    all_null = {**body, **{name: None for name in fields if name not in body}}
    r = httpx.post(f"{server.base_url}{path}", json=all_null, headers=server.headers, timeout=60)
    assert r.status_code == 200, r.text
    openai_schemas(component.replace("Request", "Response"), r.json())


@pytest.mark.parametrize(
    "body",
    [
        # the spec allows top_logprobs without logprobs: it is ignored (docs/api.md)
        {"top_logprobs": 3},
        # a json_schema format whose schema is left out: any JSON object
        {"response_format": {"type": "json_schema", "json_schema": {"name": "anything"}}},
        {"stream_options": {"include_usage": None, "include_obfuscation": False}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."}]}, {"role": "function", "name": "f", "content": "1"}]},
        {"service_tier": "auto", "store": False, "metadata": {"a": "b"}, "prediction": None, "modalities": ["text"]},
    ],
)
def test_requests_the_spec_allows_are_accepted(server, openai_schemas, body):
    sent = {"model": MODEL, "messages": QUESTION, "max_tokens": 4, **body}
    r = httpx.post(f"{server.base_url}/chat/completions", json=sent, headers=server.headers, timeout=60)
    assert r.status_code == 200, r.text
    openai_schemas("CreateChatCompletionResponse", r.json())
    assert r.json()["choices"][0]["logprobs"] is None


@pytest.mark.parametrize(
    ("part", "words"),
    [
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}, "cannot read images"),
        ({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}, "cannot hear audio"),
    ],
)
def test_an_image_is_refused_not_dropped(server, openai_schemas, part, words):
    content = [{"type": "text", "text": "What is in this picture?"}, part]
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4},
        headers=server.headers,
        timeout=60,
    )
    assert r.status_code == 400, r.text
    openai_schemas("ErrorResponse", r.json())
    err = r.json()["error"]
    assert f"Model '{MODEL}' {words}" in err["message"]
    assert err["param"] == "messages"
    with pytest.raises(openai.BadRequestError, match="cannot read images"):
        server.client().chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
        )


@pytest.mark.parametrize("kind", [["image_url"], {"a": 1}, 5, None])
def test_a_part_whose_type_is_not_a_string_is_no_server_error(server, kind):
    content = [{"type": "text", "text": "Hi."}, {"type": kind, "text": "x"}]
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2},
        headers=server.headers,
        timeout=60,
    )
    assert r.status_code < 500, r.text
    again = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": MODEL, "messages": QUESTION, "max_tokens": 2},
        headers=server.headers,
        timeout=60,
    )
    assert again.status_code == 200, again.text


@pytest.mark.parametrize("text", [["x"], {"a": 1}, 5, None])
def test_a_text_part_whose_text_is_not_a_string_is_refused_in_one_sentence(server, openai_schemas, text):
    content = [{"type": "text", "text": "Hi."}, {"type": "text", "text": text}]
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2},
        headers=server.headers,
        timeout=60,
    )
    assert r.status_code == 400, r.text
    openai_schemas("ErrorResponse", r.json())
    assert r.json()["error"]["message"] == "A message's text part needs its 'text' as a string."


def test_openai_spec_is_read_from_the_repository():
    from pathlib import Path

    from tests.engine.server.conftest import SPEC

    root = Path(__file__).resolve().parents[3]
    assert SPEC.is_relative_to(root) and SPEC.is_file()
    assert (SPEC.parent / "LICENSE").read_text().startswith("The MIT License")


def test_logprobs_are_those_of_the_answers_text_never_of_a_stop_string(server):
    """An answer cut by a stop string lists the log-probabilities of its text's tokens, not of the tokens that
    made the stop string (they are not in the answer): joined, the tokens are the text, streamed or not."""
    client = server.client()
    count = [{"role": "user", "content": "Count from 1 to 10."}]
    whole = client.chat.completions.create(model=MODEL, messages=count, max_tokens=30, temperature=0)
    whole = whole.choices[0].message.content
    stop = whole[len(whole) // 2 :][:2]  # two characters from the middle: a stop string inside the answer
    cut = whole[: whole.index(stop)]
    asked = {"model": MODEL, "messages": count, "max_tokens": 30, "temperature": 0, "stop": [stop], "logprobs": True}
    plain = client.chat.completions.create(**asked).choices[0]
    assert plain.finish_reason == "stop" and plain.message.content == cut
    assert "".join(t.token for t in plain.logprobs.content) == cut
    text, tokens = "", ""
    for chunk in client.chat.completions.create(**asked, stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            tokens += "".join(t.token for t in (choice.logprobs.content or ())) if choice.logprobs else ""
    assert text == tokens == cut

    prompt = "1, 2, 3,"
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0).choices[0].text
    stop = whole[len(whole) // 2 :][:2]
    choice = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stop=[stop], logprobs=1)
    choice = choice.choices[0]
    assert choice.text == whole[: whole.index(stop)] == "".join(choice.logprobs.tokens)
