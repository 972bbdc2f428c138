"""OpenAI's custom (freeform) tools: offered to the model as a function of one string, their calls given back as
text, in either API's shape."""

from __future__ import annotations

import json

import pytest

from engine.errors import InvalidRequest
from engine.tools import (
    CUSTOM_INPUT,
    CustomInputStream,
    ToolCall,
    custom_input,
    parse_tool_calls,
    parse_tool_choice,
    parse_tools,
)

CHAT = {"type": "custom", "custom": {"name": "shell", "description": "Run a command.",
                                      "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": "ls( -[a-z]+)?"}}}}  # fmt: skip
RESPONSES = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'}}  # fmt: skip


def test_both_shapes_become_a_function_of_one_string_that_says_its_format():
    shell, patch, plain = parse_tools([CHAT, RESPONSES, {"type": "custom", "name": "note"}])
    for tool in (shell, patch, plain):
        assert tool.parameters["required"] == [CUSTOM_INPUT] and tool.parameters["properties"][CUSTOM_INPUT]["type"] == "string"
        assert tool.as_openai()["type"] == "function"  # how a chat template takes it
    assert shell.custom == {"type": "custom", "name": "shell", "description": "Run a command.",
                            "format": {"type": "grammar", "syntax": "regex", "definition": "ls( -[a-z]+)?"}}  # fmt: skip
    # a regular expression is held to, as a strict tool's schema is; a Lark grammar is told to the model
    assert shell.strict and shell.parameters["properties"][CUSTOM_INPUT]["pattern"] == "^(ls( -[a-z]+)?)$"
    assert not patch.strict and "*** Begin Patch" in patch.parameters["properties"][CUSTOM_INPUT]["description"]
    assert plain.custom["format"] == {"type": "text"} and plain.description == ""


@pytest.mark.parametrize(
    ("fmt", "said"),
    [
        ({"type": "json"}, "format of type 'json'"),
        ({"type": "grammar", "syntax": "ebnf", "definition": "x"}, "lark or regex"),
        ({"type": "grammar", "grammar": {"syntax": "regex"}}, "'definition'"),
        ({"type": "grammar", "syntax": "regex", "definition": "ls(("}, "no regular expression"),
    ],
)
def test_a_format_hearth_cannot_read_is_a_400_naming_the_tool(fmt, said):
    with pytest.raises(InvalidRequest) as info:
        parse_tools([{"type": "custom", "name": "shell", "format": fmt}])
    assert "tools[0] ('shell')" in str(info.value) and said in str(info.value) and info.value.param == "tools"


def test_a_choice_and_a_call_in_either_shape_name_the_tool():
    tools = parse_tools([CHAT, RESPONSES])
    assert parse_tool_choice({"type": "custom", "custom": {"name": "shell"}}, tools).name == "shell"  # chat completions
    assert parse_tool_choice({"type": "custom", "name": "apply_patch"}, tools).name == "apply_patch"  # Responses
    allowed = parse_tool_choice({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "custom", "name": "shell"}]}, tools)
    assert allowed.allowed == ("shell",)
    (call,) = parse_tool_calls([{"id": "call_1", "type": "custom", "custom": {"name": "shell", "input": 'ls "a b"'}}])
    assert (call.name, call.id, custom_input(call)) == ("shell", "call_1", 'ls "a b"')
    assert json.loads(call.arguments) == {CUSTOM_INPUT: 'ls "a b"'}


def test_the_input_of_a_call_the_model_wrote_otherwise_is_still_its_text():
    assert custom_input(ToolCall("shell", '{"input": "ls -l"}')) == "ls -l"
    assert custom_input(ToolCall("shell", '{"command": "ls -l"}')) == "ls -l"  # one string under another name
    assert custom_input(ToolCall("shell", "ls -l")) == "ls -l"  # no JSON at all
    assert custom_input(ToolCall("shell", '{"input": "ls -l')) == "ls -l"  # cut off by the token limit


def test_the_input_streams_decoded_piece_by_piece_whatever_the_cut():
    text = 'line "one"\n\ttab \\ back é ☃ 😀 end'
    raw = json.dumps({CUSTOM_INPUT: text})  # \u escapes, a surrogate pair among them
    for size in (1, 2, 3, 5, 7):
        stream = CustomInputStream()
        got = "".join(stream.feed(raw[i : i + size]) for i in range(0, len(raw), size))
        assert got == text and stream.rest(text) == "", size
    raw = json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)
    stream = CustomInputStream()
    assert "".join(stream.feed(ch) for ch in raw) == text
    assert stream.feed(" ") == ""  # nothing after the string's end


def test_what_the_stream_could_not_read_comes_with_the_whole_input():
    stream = CustomInputStream()
    assert stream.feed('{"command": "ls') == ""  # not the shape it streams
    assert stream.rest(custom_input(ToolCall("shell", '{"command": "ls -l"}'))) == "ls -l"
    stream = CustomInputStream()
    assert stream.feed('{"input": "a\\u00') == "a"  # an escape waits for its digits
    assert stream.feed('e9b"}') == "éb"
