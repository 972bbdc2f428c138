"""Markup written with control tokens (Mistral's [TOOL_CALLS] and [ARGS], Magistral's [THINK]) shows in the answer's
text for its parser, on llama.cpp and Hearth's own vocabulary alike: a control token's piece is empty, and the
thinking and the call were read as the text 'hmOkget_weather{...}'."""

from __future__ import annotations

import pytest

from engine.tools import parse_tools
from engine.types import ChatMessage, GenerationRequest, ResponseFormat, SamplingParams

SPECIALS = ["<s>", "</s>", "[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]"]  # control tokens, ids 0-5
TEMPLATE = ("{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}{% for m in messages %}"
            "{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]{% else %}{{ m.content }}</s>{% endif %}{% endfor %}"
            "{# its calls: [TOOL_CALLS]name[ARGS]{...}; its thinking: [THINK]...[/THINK] #}")  # fmt: skip
TOOLS = parse_tools([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}])  # fmt: skip
# the random model writes what the grammar allows: the control tokens themselves (by id), and text
ANSWER = 'start: <[4]> "hm" <[5]> "Ok" <[2]> "get_weather" <[3]> "{\\"city\\": \\"Paris\\"}"'


@pytest.fixture(scope="module")
def mistral_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    from tests.engine.gguf.test_vocab import write_starcoder_gguf

    path = tmp_path_factory.mktemp("markers") / "tiny-mistral-markers.gguf"
    write_starcoder_gguf(path, SPECIALS, eos=1, template=TEMPLATE, context=512)
    return path


@pytest.mark.parametrize("kind", ["llama", "paged"])
def test_thinking_and_calls_written_with_control_tokens_are_read(kind, mistral_gguf):
    from engine.backends.base import ModelSpec
    from tests.engine.tools.backends import load_backend

    backend = load_backend(kind, ModelSpec(name="m", path=mistral_gguf), n_ctx=256)
    try:
        req = GenerationRequest(model="m", messages=(ChatMessage("user", "hi"),), tools=TOOLS,
                                params=SamplingParams(temperature=0, max_tokens=60),
                                response_format=ResponseFormat(type="grammar", grammar=ANSWER, syntax="lark"))  # fmt: skip
        chunks = list(backend.stream(req))
    finally:
        backend.close()
    assert [t for c in chunks for t in c.token_ids][:1] == [4]  # written with the control token
    assert "".join(c.reasoning or "" for c in chunks) == "hm" and "".join(c.text for c in chunks) == "Ok"
    assert [(c.name, c.arguments) for chunk in chunks for c in chunk.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    assert chunks[-1].finish_reason == "tool_calls"
