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
    shell, patch, plain = parse_tools([CHAT, RESPONSES, {"type": "custom", "name": "note"}], custom=True)
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
        parse_tools([{"type": "custom", "name": "shell", "format": fmt}], custom=True)
    assert "tools[0] ('shell')" in str(info.value) and said in str(info.value) and info.value.param == "tools"


def test_a_choice_and_a_call_in_either_shape_name_the_tool():
    tools = parse_tools([CHAT, RESPONSES], custom=True)
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


def test_apis_whose_calls_are_json_only_refuse_a_custom_tool():
    """Ollama's and Anthropic's calls carry JSON arguments: a custom tool there is a 400, as before."""
    with pytest.raises(InvalidRequest, match="only 'function' tools are supported"):
        parse_tools([RESPONSES])


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ('{"input": "a\\u-001b"}', "au-001b"),  # no four hex digits: the escape's letter, as other unknown ones
        ('{"input": "a\\x41"}', "ax41"),
        ('{"input": "\\udc00x"}', "\ufffdx"),  # a low surrogate alone
        ('{"input": "x\\ud83d"}', "x\ufffd"),  # a high one before the closing quote
        ('{"input": "\\ud83dx"}', "\ufffdx"),
        ('{"input": "\\ud83d\\u0041"}', "\ufffdA"),
        ('{"input": "two\nlines"}', "two\nlines"),  # a raw line break, which strict JSON refuses
    ],
)
def test_a_malformed_string_streams_what_the_whole_input_says(raw, text):
    """What was streamed and the whole input agree (a chat client has nothing else to correct it with), and neither
    holds a lone surrogate, which no UTF-8 can encode."""
    whole = custom_input(ToolCall("shell", raw))
    assert whole == text
    whole.encode("utf-8")
    for size in (1, 3, len(raw)):
        stream = CustomInputStream()
        streamed = "".join(stream.feed(raw[i : i + size]) for i in range(0, len(raw), size))
        assert streamed + stream.rest(whole) == whole, size


def test_a_long_input_in_small_pieces_streams_whole():
    text = "*** Begin Patch\n" + "+ a line with \"quotes\" and \\ and é\n" * 5000
    raw = json.dumps({CUSTOM_INPUT: text})
    stream = CustomInputStream()
    assert "".join(stream.feed(raw[i : i + 3]) for i in range(0, len(raw), 3)) == text
    assert stream.raw == raw and len(stream.tail) == 0
