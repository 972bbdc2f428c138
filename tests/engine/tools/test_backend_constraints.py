"""A forced tool call parses and validates in the paged engine and MLX (llguidance), as in llama.cpp (GBNF,
through a real server in tests/engine/server/test_tool_calls.py)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.backends.base import LoadOptions, ModelSpec, PagedOptions
from engine.tools import parse_tool_choice, parse_tools
from engine.types import GenerationRequest, ResponseFormat, SamplingParams, as_messages

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
}
TOOLS = parse_tools(
    [
        {"type": "function", "function": {"name": "get_weather", "description": "Forecast for a city.",
                                          "parameters": WEATHER}},
        {"type": "function", "function": {"name": "get_time", "description": "The time in a city.",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    ]
)  # fmt: skip
ASK = as_messages([{"role": "user", "content": "What will the weather be in Oslo for the next 3 days?"}])


def _load(kind: str, path):
    if kind == "paged":
        pytest.importorskip("torch")
        from engine.backends.paged import PagedBackend

        backend = PagedBackend()
        options = LoadOptions(n_ctx=1024, n_seq_max=2, paged=PagedOptions(num_kv_blocks=128, device="cpu"))
    else:
        pytest.importorskip("mlx.core")
        from engine.backends.mlx import MLXBackend

        backend, options = MLXBackend(), LoadOptions(n_ctx=1024)
    backend.load(ModelSpec(name="starter", path=path), options)
    return backend


@pytest.fixture(scope="module", params=["paged", "mlx"])
def backend(request, starter_path):
    b = _load(request.param, starter_path)
    yield b
    b.close()


def _run(backend, **kw):
    req = GenerationRequest(model="starter", messages=ASK, tools=TOOLS,
                            params=SamplingParams(temperature=0, max_tokens=48), **kw)  # fmt: skip
    return list(backend.stream(req))


def test_required_call_parses_and_validates(backend):
    if backend.name != "paged":
        # the grammar and its engine (llguidance) are the paged engine's; MLX's use of them is checked with a
        # schema in tests/engine/backends/test_mlx.py, at a fraction of a forced call's cost on MLX's CPU build
        pytest.skip("one backend suffices for the forced call: the grammar is the same")
    chunks = _run(backend, tool_choice=parse_tool_choice("required", TOOLS))
    final = chunks[-1]
    assert final.finish_reason == "tool_calls", "".join(c.text for c in chunks)
    assert "".join(c.text for c in chunks) == ""  # no markup or stray text as content
    (call,) = final.tool_calls
    schema = {t.name: t.parameters for t in TOOLS}[call.name]
    jsonschema.validate(json.loads(call.arguments), schema)


def test_named_function_is_the_one_called(backend):
    if backend.name != "paged":
        pytest.skip("one backend suffices for the name: the grammar is the same")
    chunks = _run(backend, tool_choice=parse_tool_choice({"type": "function", "function": {"name": "get_time"}}, TOOLS))
    assert [c.name for c in chunks[-1].tool_calls] == ["get_time"]


def test_json_schema_response_format_is_enforced(backend):
    if backend.name != "paged":
        pytest.skip("MLX's response_format is checked in tests/engine/backends/test_mlx.py")
    req = GenerationRequest(
        model="starter",
        messages=ASK,
        params=SamplingParams(temperature=0, max_tokens=48),
        response_format=ResponseFormat(type="json_schema", schema=WEATHER),
    )
    chunks = list(backend.stream(req))
    assert chunks[-1].finish_reason == "stop"
    jsonschema.validate(json.loads("".join(c.text for c in chunks)), WEATHER)


def test_a_requests_own_grammar_holds_the_text(backend):
    """A request's own grammar (GBNF, a regular expression, a choice) holds the paged engine's and MLX's text, as
    llama.cpp's (tests/engine/server/test_structured_output.py), all through llguidance."""
    import re

    for fmt, fits in (
        (ResponseFormat(type="grammar", grammar='root ::= ("yes" | "no") "!"', syntax="gbnf", param="grammar"),
         lambda t: t in ("yes!", "no!")),
        (ResponseFormat(type="grammar", grammar=r"[0-9]{3}-[a-z]{2}", syntax="regex", param="guided_regex"),
         lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2}", t)),
        (ResponseFormat.choice(["Oslo", "Bergen"], param="guided_choice"), lambda t: t in ("Oslo", "Bergen")),
    ):  # fmt: skip
        req = GenerationRequest(model="starter", messages=ASK, params=SamplingParams(temperature=0.9, seed=3, max_tokens=24),
                                response_format=fmt)  # fmt: skip
        chunks = list(backend.stream(req))
        text = "".join(c.text for c in chunks)
        assert fits(text) and chunks[-1].finish_reason == "stop", (fmt.syntax, text)


def test_a_grammar_no_text_matches_stops_the_answer_with_the_reason(backend):
    """The paged engine and MLX, like llama.cpp (tests/engine/server/test_structured_output.py), stop a request
    whose own grammar llguidance gives up on with the reason, not with the end token drawn in its place."""
    fmt = ResponseFormat(type="grammar", grammar=r"[^\s\S]", syntax="regex", param="guided_regex")
    req = GenerationRequest(model="starter", messages=ASK, params=SamplingParams(temperature=0, max_tokens=8),
                            response_format=fmt)  # fmt: skip
    last = list(backend.stream(req))[-1]
    assert last.finish_reason == "error" and "no text matches it" in (last.error or ""), last
    after = list(backend.stream(GenerationRequest(model="starter", messages=ASK,
                                                  params=SamplingParams(temperature=0, max_tokens=4))))  # fmt: skip
    assert after[-1].finish_reason == "length"  # the next request is answered as before
