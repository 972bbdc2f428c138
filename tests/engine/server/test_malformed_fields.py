"""Fields that clients build by hand, given values of the wrong type, in every dialect: each request is answered
or refused (a 4xx), never a server error, and the server goes on answering.

The schema fuzzing of tests/engine/server/test_fuzz.py generates requests the documents allow; these are the ones
they do not: a content part's ``text`` that is a list, a tool call that is a number, Ollama ``options`` whose
``stop`` is an object, and the like, in the places where Hearth reads a request's JSON itself.
"""

from __future__ import annotations

import json

import httpx

from tests.engine.server.conftest import MODEL

WRONG = (["x"], {"a": 1}, 5, None, True, "")


def bodies(v) -> list[tuple[str, dict]]:
    """``(path under the server's root, body)`` with ``v`` where a field of another type belongs."""
    hi = [{"role": "user", "content": "hi"}]
    chat = {"model": MODEL, "max_tokens": 2}
    anthropic = {"model": MODEL, "max_tokens": 2}
    responses = {"model": MODEL, "max_output_tokens": 16}
    ollama = {"model": MODEL, "stream": False, "options": {"num_predict": 2}}
    return [
        ("/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": [{"type": "text", "text": v}]}]}),
        ("/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": [{"type": v, "text": "x"}]}]}),
        ("/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": v}]}]}),
        ("/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": [v]}]}),
        ("/v1/chat/completions", {**chat, "messages": [{"role": "assistant", "content": "x", "tool_calls": [v]}, *hi]}),
        ("/v1/chat/completions", {**chat, "messages": [{"role": "tool", "content": "x", "tool_call_id": v}, *hi]}),
        ("/v1/chat/completions", {**chat, "messages": hi, "prediction": {"type": "content", "content": v}}),
        ("/v1/chat/completions", {**chat, "messages": hi, "tools": [{"type": "function", "function": v}]}),
        ("/v1/chat/completions", {**chat, "messages": hi, "tool_choice": v}),
        ("/v1/chat/completions", {**chat, "messages": hi, "response_format": v}),
        ("/v1/chat/completions", {**chat, "messages": hi, "stop": v}),
        ("/v1/chat/completions", {**chat, "messages": hi, "logit_bias": v}),
        ("/v1/chat/completions", {**chat, "messages": hi, "chat_template_kwargs": v}),
        ("/v1/completions", {**chat, "prompt": v}),
        ("/v1/embeddings", {"model": MODEL, "input": v}),
        ("/v1/messages", {**anthropic, "messages": [{"role": "user", "content": [{"type": "image", "source": v}]}]}),
        ("/v1/messages", {**anthropic, "messages": [{"role": "user", "content": [v]}]}),
        ("/v1/messages", {**anthropic, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": v, "content": v}]}]}),
        ("/v1/messages", {**anthropic, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": v, "name": v, "input": v}]}, *hi]}),
        ("/v1/messages", {**anthropic, "messages": hi, "system": v}),
        ("/v1/messages", {**anthropic, "messages": hi, "stop_sequences": v}),
        ("/v1/messages", {**anthropic, "messages": hi, "thinking": v}),
        ("/v1/messages/count_tokens", {"model": MODEL, "messages": [{"role": "user", "content": [v]}]}),
        ("/v1/responses", {**responses, "input": [v]}),
        ("/v1/responses", {**responses, "input": [{"role": "user", "content": [v]}]}),
        ("/v1/responses", {**responses, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": v}]}]}),
        ("/v1/responses", {**responses, "input": [{"type": "function_call_output", "call_id": v, "output": v}]}),
        ("/v1/responses", {**responses, "input": "hi", "reasoning": v}),
        ("/v1/responses", {**responses, "input": "hi", "text": v}),
        ("/v1/responses", {**responses, "input": "hi", "tools": [v]}),
        ("/api/chat", {**ollama, "messages": [{"role": "user", "content": "hi", "images": [v]}]}),
        ("/api/chat", {**ollama, "messages": [v]}),
        ("/api/chat", {**ollama, "messages": [{"role": "assistant", "content": "", "tool_calls": [v]}, *hi]}),
        ("/api/chat", {**ollama, "messages": hi, "format": v}),
        ("/api/chat", {**ollama, "messages": hi, "tools": [v]}),
        ("/api/generate", {**ollama, "prompt": "hi", "images": [v]}),
        ("/api/generate", {**ollama, "prompt": "hi", "options": {"stop": v, "num_predict": 2}}),
        ("/api/generate", {**ollama, "prompt": "hi", "options": {"temperature": v, "top_k": v, "num_predict": 2}}),
        ("/api/generate", {**ollama, "prompt": "hi", "options": {"seed": v, "num_ctx": v, "num_predict": 2}}),
        ("/api/embed", {"model": MODEL, "input": v}),
        ("/tokenize", {"model": MODEL, "content": v}),
        ("/detokenize", {"model": MODEL, "tokens": v}),
    ]  # fmt: skip


def test_wrong_types_in_hand_built_fields_are_answered_or_refused_never_a_server_error(server):
    failed = []
    with httpx.Client(base_url=server.root, headers=server.headers, timeout=60) as client:
        for v in WRONG:
            for path, body in bodies(v):
                try:
                    status = client.post(path, json=body).status_code
                except httpx.TransportError as exc:  # a connection the server dropped
                    status = repr(exc)
                if not isinstance(status, int) or status >= 500:
                    failed.append((path, body, status))
        after = client.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert not failed, failed[:5]
    assert after.status_code == 200, after.text


def test_chat_template_kwargs_cannot_replace_what_hearth_renders_the_template_with(server):
    """``messages`` and ``add_generation_prompt`` were a 500, ``bos_token`` a 400 that showed the renderer's
    TypeError: each is a 400 that names the field, in one sentence."""
    hi = [{"role": "user", "content": "hi"}]
    with httpx.Client(base_url=server.root, headers=server.headers, timeout=60) as client:
        for name in ("messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "raise_exception", "range"):
            body = {"model": MODEL, "max_tokens": 2, "messages": hi, "chat_template_kwargs": {name: 1}}
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 400, (name, r.text)
            error = r.json()["error"]
            assert error["param"] == "chat_template_kwargs"
            assert error["message"].startswith(f"'chat_template_kwargs.{name}' is Hearth's to give the chat template"), error
            assert "TypeError" not in error["message"] and "keyword argument" not in error["message"]
        kept = {"model": MODEL, "max_tokens": 2, "temperature": 0, "messages": hi,
                "chat_template_kwargs": {"enable_thinking": False, "custom_flag": "x"}}  # fmt: skip
        assert client.post("/v1/chat/completions", json=kept).status_code == 200


def test_deep_nesting_and_lone_surrogates_are_answered_or_refused_never_a_server_error(server):
    """A tool call's arguments nested 1,500 deep (3 KB of JSON), template variables nested 900 deep, and JSON's
    escape of a lone UTF-16 surrogate ("\\ud800": no character, so every later UTF-8 encoding of it failed) in a
    grammar's pattern, an echoed field, a model's name and a streamed echo."""
    deep = "[" * 1500 + "]" * 1500
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}
    hi = [{"role": "user", "content": "hi"}]
    long = "word " * 5000  # past the context: the chat is rendered and counted, and no time goes to reading it
    cases = [
        ({"model": MODEL, "max_tokens": 2, "messages": [*hi, {"role": "assistant", "content": None, "tool_calls": [call]},
                                                        {"role": "tool", "tool_call_id": "c1", "content": long}]},
         "context_length_exceeded"),
        ({"model": MODEL, "max_tokens": 2, "messages": hi, "chat_template_kwargs": {"deep": json.loads("[" * 900 + "]" * 900)}},
         "invalid_value"),
        ({"model": MODEL, "max_tokens": 2, "messages": hi, "tools": [{"type": "function", "function": {"name": "f",
          "parameters": {"type": "object", "properties": {"x": json.loads('{"items":' * 900 + "{}" + "}" * 900)}}}}]},
         "invalid_value"),  # read 55 s as a prompt before: refused at once, as the doc says
    ]  # fmt: skip
    for body, code in cases:
        r = httpx.post(f"{server.root}/v1/chat/completions", json=body, headers=server.headers, timeout=120)
        assert r.status_code == 400 and r.json()["error"]["code"] == code, r.text[:300]
    lone = b"\\ud800"
    raw = [
        ("/v1/chat/completions", b'{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":"hi"}],'
         b'"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"string","pattern":"^a%s$"}}}}'),
        ("/v1/responses", b'{"model":"%s","max_output_tokens":2,"input":"hi","instructions":"be %s brief","metadata":{"k":"%s"}}'),
        ("/tokenize", b'{"model":"%s%s","content":"hi"}'),
    ]  # fmt: skip
    for path, template in raw:
        body = template.replace(b"%s", MODEL.encode(), 1).replace(b"%s", lone)
        r = httpx.post(f"{server.root}{path}", content=body, headers={**server.headers, "Content-Type": "application/json"},
                       timeout=120)  # fmt: skip
        assert r.status_code < 500, (path, r.text[:300])
    answer = httpx.post(f"{server.root}/v1/responses", headers={**server.headers, "Content-Type": "application/json"},
                        content=raw[1][1].replace(b"%s", MODEL.encode(), 1).replace(b"%s", lone), timeout=120).json()  # fmt: skip
    assert answer["instructions"] == "be \ufffd brief" and answer["metadata"] == {"k": "\ufffd"}
    echo = b'{"model":"%s","max_tokens":2,"stream":true,"echo":true,"prompt":"a%sb"}' % (MODEL.encode(), lone)
    with httpx.stream("POST", f"{server.root}/v1/completions", content=echo, timeout=120,
                      headers={**server.headers, "Content-Type": "application/json"}) as streamed:  # fmt: skip
        lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    assert streamed.status_code == 200 and lines[-1] == "data: [DONE]"
    assert json.loads(lines[0][6:])["choices"][0]["text"] == "a\ufffdb"
