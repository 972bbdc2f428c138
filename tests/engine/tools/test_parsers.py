"""Tool-call parsers per family, on outputs written for the tests, whole and split into stream pieces."""

from __future__ import annotations

import json

import pytest

from engine.tools import ToolCallParser, parse_tool_calls_text

NAMES = ("get_weather", "add")


def stream(fmt: str, pieces: list[str], names=NAMES):
    """Feed pieces one by one; return (content, calls, deltas) as a client would assemble them."""
    p = ToolCallParser(fmt, names)
    content, deltas = [], []
    for piece in [*pieces, None]:
        out = p.finish() if piece is None else p.feed(piece)
        content.append(out.content)
        deltas.extend(out.tool_calls)
    return "".join(content), [(c.name, json.loads(c.arguments)) for c in p.calls], deltas


def chars(text: str) -> list[str]:
    return list(text)


CASES = {
    "hermes": (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    ),
    "llama3": (
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"name": "add", "parameters": {"a": 1, "b": 2}}',
    ),
    "mistral": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}',
    ),
    "deepseek": (  # V3.1's, then R1's (and its distills')
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```'
        '<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"a": 1, "b": 2}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>",
    ),
    "gemma4": (  # bare keys, text between <|"|> marks
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>',
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><|tool_call>call:add{a:1,b:2}<tool_call|>',
    ),
    "granite": (  # Granite 3's: the marker, then a JSON list
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "add", "arguments": {"a": 1, "b": 2}}]',
    ),
    "pythonic": (  # LFM2's: Python calls with keyword arguments
        '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>',
        "<|tool_call_start|>[get_weather(city='Paris'), add(a=1, b=2)]<|tool_call_end|>",
    ),
    "seed": (  # Seed-OSS's: Qwen3-Coder's body in tags of its own
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>",
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>"
        "<seed:tool_call>\n<function=add>\n<parameter=a>1</parameter>\n<parameter=b>2</parameter>\n</function>\n</seed:tool_call>",
    ),
    "apertus": (  # a list of {NAME: ARGUMENTS}
        '<|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>',
        '<|tools_prefix|>[{"get_weather": {"city": "Paris"}}, {"add": {"a": 1, "b": 2}}]<|tools_suffix|>',
    ),
    "cohere": (  # Command R7B's and A's
        '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>',
        '<|START_ACTION|>[\n{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}},\n'
        '{"tool_call_id": "1", "tool_name": "add", "parameters": {"a": 1, "b": 2}}\n]<|END_ACTION|>',
    ),
    "minimax": (  # MiniMax M2's
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>',
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
        '<invoke name="add">\n<parameter name="a">1</parameter>\n<parameter name="b">2</parameter>\n</invoke>\n</minimax:tool_call>',
    ),
    "minicpm": (  # MiniCPM 5's, a value in CDATA
        '<function name="get_weather"><param name="city"><![CDATA[Paris]]></param></function>',
        '<function name="get_weather"><param name="city">Paris</param></function>\n'
        '<function name="add"><param name="a">1</param><param name="b">2</param></function>',
    ),
    "kimi": (  # Kimi K2's
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}'
        "<|tool_call_end|><|tool_calls_section_end|>",
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}'
        '<|tool_call_end|><|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>{"a": 1, "b": 2}<|tool_call_end|>'
        "<|tool_calls_section_end|>",
    ),
    "generic": (
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call>',
    ),
}


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_single_call(fmt):
    content, calls = parse_tool_calls_text(fmt, CASES[fmt][0], NAMES)
    assert content == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0].id.startswith("call_")


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_parallel_calls_become_several(fmt):
    content, calls = parse_tool_calls_text(fmt, CASES[fmt][1], NAMES)
    assert content == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("add", {"a": 1, "b": 2}),
    ]
    assert len({c.id for c in calls}) == 2


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_markup_split_across_every_character(fmt):
    content, calls, deltas = stream(fmt, chars(CASES[fmt][1]))
    assert content == ""
    assert [name for name, _ in calls] == ["get_weather", "add"]
    # OpenAI's stream shape: a first delta with id and name, then pieces of the arguments
    firsts = [d for d in deltas if d.id is not None]
    assert [(d.index, d.name, d.arguments) for d in firsts] == [(0, "get_weather", ""), (1, "add", "")]
    args = {i: "".join(d.arguments for d in deltas if d.index == i) for i in (0, 1)}
    assert json.loads(args[1]) == {"a": 1, "b": 2}


@pytest.mark.parametrize("fmt", ["hermes", "generic"])
def test_a_call_after_some_text(fmt):
    text = 'Let me look that up.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    content, calls, _ = stream(fmt, [text[i : i + 3] for i in range(0, len(text), 3)])
    assert content == "Let me look that up.\n"
    assert calls == [("get_weather", {"city": "Oslo"})]


def test_llama3_call_after_text_through_the_python_tag():
    content, calls = parse_tool_calls_text(
        "llama3", 'Checking.<|python_tag|>{"name": "add", "parameters": {"a": 1}}', NAMES
    )
    assert content == "Checking."
    assert [c.name for c in calls] == ["add"]


@pytest.mark.parametrize(
    "fmt,text",
    [
        ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\n</tool_call>'),
        ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}'),  # never closed
        ("llama3", '{"name": "get_weather", "parameters": {"city": '),
        ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city"'),
        ("generic", '{"name": "get_weather", "arguments": [1, 2]}'),
        ("generic", '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>'),  # not an offered tool
    ],
)
def test_broken_calls_come_back_as_text(fmt, text):
    content, calls, _ = stream(fmt, chars(text))
    assert calls == []
    assert content == text



@pytest.mark.parametrize("fmt", ["hermes", "generic"])
def test_a_raw_line_break_inside_an_argument_is_still_a_call(fmt):
    """Small models write code into an argument with its line breaks as they are, which strict JSON refuses: the call
    is kept, its arguments written back as JSON with them escaped."""
    text = '<tool_call>{"name": "add", "arguments": {"a": "def f():\n\treturn 1"}}</tool_call>'
    content, calls, _ = stream(fmt, chars(text))
    assert content == "" and calls == [("add", {"a": "def f():\n\treturn 1"})]
    _, (call,) = parse_tool_calls_text(fmt, text, NAMES)
    assert "\n" not in call.arguments and json.loads(call.arguments) == {"a": "def f():\n\treturn 1"}



def test_a_lone_surrogate_escape_in_an_argument_is_u_fffd():
    """``"\ud83d"`` alone decodes to a character no UTF-8 can carry: a response holding it could not be sent."""
    from engine.tools import ToolCall

    text = '<tool_call>{"name": "add", "arguments": {"a": "x\\ud83d \\ud83d\\ude00"}}</tool_call>'
    _, (call,) = parse_tool_calls_text("hermes", text, NAMES)
    assert json.loads(call.arguments) == {"a": "x\ufffd \U0001f600"}
    call.arguments.encode("utf-8")
    assert ToolCall("add", '{"a": "\\udc00", "b": ["\\ud800').arguments_object == {"a": "\ufffd", "b": ["\ufffd"]}

def test_plain_text_passes_untouched_even_with_a_partial_marker_at_the_end():
    text = "Use <b>bold</b> and a < sign, then <tool"
    content, calls, _ = stream("hermes", [text[:10], text[10:]])
    assert calls == [] and content == text


def test_json_that_is_not_a_call_stays_content():
    content, calls = parse_tool_calls_text("generic", '{"answer": 42}', NAMES)
    assert calls == [] and content == '{"answer": 42}'


def test_whitespace_between_calls_does_not_become_content():
    text = CASES["hermes"][1].replace("\n<tool_call>", "\n\n\n<tool_call>") + "\n\n"
    content, calls = parse_tool_calls_text("hermes", text, NAMES)
    assert content == "" and len(calls) == 2


@pytest.mark.parametrize(
    ("fmt", "text", "forced", "name", "arguments"),
    [
        ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', None, "get_weather", '{"city": "Par'),
        ("generic", '{"name": "get_weather", "arguments": {"city": "Paris",', None, "get_weather", '{"city": "Paris",'),
        ("generic", '<tool_call>{"name": "get_wea', "get_weather", "get_weather", ""),  # cut in the name: the forced one
        ("llama3", '<|python_tag|>{"name": "add", "parameters": {"a": 2', None, "add", '{"a": 2'),
        # cut after the arguments: neither the call's own brace nor a piece of the end marker is an argument
        ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_c', None,
         "get_weather", '{"city": "Paris"}'),
        ("hermes", '<tool_call>\n{"name": "add", "arguments": { } }\n</', None, "add", "{}"),
        ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}', None, "get_weather",
         '{"city": "Paris"}'),
        ("generic", '{"name": "add", "arguments": {"a": 2}', None, "add", '{"a": 2}'),
    ],
)
def test_a_call_cut_short_at_the_token_limit_is_a_call_with_what_was_written(fmt, text, forced, name, arguments):
    parser = ToolCallParser(fmt, ["get_weather", "add"], forced=forced)
    a, b = parser.feed(text), parser.finish(cut=True)
    assert a.content + b.content == ""  # markup never reaches the content
    (call,) = parser.calls
    assert (call.name, call.arguments) == (name, arguments)
    assert "".join(d.arguments for d in a.tool_calls + b.tool_calls) == arguments


@pytest.mark.parametrize("text", ["<tool", "\n<tool_call", "<"])
def test_a_forced_call_cut_inside_its_opening_marker_is_that_call_never_the_markers_text(text):
    """A forced choice's answer is calls: cut by the token limit before its opening marker was whole, it is the
    forced call with no arguments yet (OpenAI's partial call), or nothing when no one tool is forced."""
    parser = ToolCallParser("hermes", ["get_weather", "add"], forced="add")
    a, b = parser.feed(text), parser.finish(cut=True)
    assert a.content + b.content == "" and [(c.name, c.arguments) for c in parser.calls] == [("add", "")]
    parser = ToolCallParser("hermes", ["get_weather", "add"], calls_only=True)  # required: any of two
    a, b = parser.feed(text), parser.finish(cut=True)
    assert a.content + b.content == "" and parser.calls == []
    parser = ToolCallParser("hermes", ["get_weather", "add"])  # auto: the answer's own text stays text
    a, b = parser.feed("a " + text), parser.finish(cut=True)
    assert a.content + b.content == "a " + text and parser.calls == []


def test_a_cut_call_that_names_no_offered_tool_is_dropped_and_plain_text_stays_text():
    parser = ToolCallParser("hermes", ["get_weather", "add"])
    a, b = parser.feed('Let me check. <tool_call>{"na'), parser.finish(cut=True)
    assert a.content + b.content == "Let me check. " and parser.calls == []
    parser = ToolCallParser("generic", ["get_weather"])
    a, b = parser.feed("The weather in Paris is"), parser.finish(cut=True)
    assert a.content + b.content == "The weather in Paris is" and parser.calls == []
    parser = ToolCallParser("hermes", ["get_weather"])  # not cut: an unfinished call stays text, as before
    a, b = parser.feed('<tool_call>{"name": "get_weather", "arguments": {"city'), parser.finish()
    assert (a.content + b.content).startswith("<tool_call>") and parser.calls == []


def test_a_json_answer_a_response_format_asked_for_is_never_a_bare_call(llama_backend):
    parser = ToolCallParser("generic", ["get_weather"], bare=False)
    a, b = parser.feed('{ "answer": "'), parser.finish(cut=True)
    assert a.content + b.content == '{ "answer": "' and parser.calls == []
    parser = ToolCallParser("generic", ["get_weather"], bare=False)  # whole: the answer's JSON too
    a, b = parser.feed('{"name": "get_weather", "arguments": {}}'), parser.finish()
    assert json.loads(a.content + b.content) == {"name": "get_weather", "arguments": {}} and parser.calls == []
    # through a backend: the answer cut by max_tokens is the JSON written so far, with a tool offered beside it
    from engine.tools import parse_tools
    from engine.types import ChatMessage, GenerationRequest, ResponseFormat, SamplingParams

    req = GenerationRequest(model="s", messages=(ChatMessage("user", "Describe Paris in detail as JSON."),),
                            tools=parse_tools([{"type": "function", "function": {"name": "get_weather"}}]),
                            response_format=ResponseFormat(type="json_schema", schema={
                                "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}),
                            params=SamplingParams(temperature=0, max_tokens=8))  # fmt: skip
    chunks = list(llama_backend.stream(req))
    assert not chunks[-1].tool_calls and "".join(c.text for c in chunks).lstrip().startswith("{")


def test_close_partial_json_closes_what_was_open():
    from engine.tools.spec import close_partial_json

    for text, expected in (('{"city": "Par', {"city": "Par"}), ('{"city": "Paris", ', {"city": "Paris"}),
                           ('{"city": "Paris", "unit":', {"city": "Paris"}), ('{"a": [1, 2', {"a": [1, 2]}),
                           ('{"x": "a\\', {"x": "a"}), ('{"x": "a\\\\', {"x": "a\\"}),
                           # a key cut in its name, or written without its colon: dropped, as a key without its value
                           ('{"city": "Paris", "un', {"city": "Paris"}), ('{"city": "Paris", "unit"', {"city": "Paris"}),
                           ('{"a": {"b": "c"}, "d"', {"a": {"b": "c"}}), ('[{"a": 1}, {"b', [{"a": 1}, {}]),
                           ('{"a": "b:c", "d', {"a": "b:c"})):  # fmt: skip
        assert json.loads(close_partial_json(text)) == expected, text


def test_a_call_written_in_xml_as_qwen3_coder_writes_them_typed_by_the_tools_schema():
    """Qwen3-Coder's calls: <function=NAME> and a <parameter=KEY> for each argument, in <tool_call> (they were
    shown as text); each value as the schema types it: text stays text, a number, an object, true."""
    schemas = {"edit": {"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
                                                         "code": {"type": "string"}, "opts": {"type": "object"},
                                                         "force": {"type": "boolean"}}}}  # fmt: skip
    answer = ("I'll edit it.\n<tool_call>\n<function=edit>\n<parameter=path>\n007.py\n</parameter>\n<parameter=line>\n"
              "12\n</parameter>\n<parameter=code>\ndef f():\n    return 1 < 3\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n"
              "</parameter>\n<parameter=force>\nTrue\n</parameter>\n</function>\n</tool_call>")  # fmt: skip
    want = {"path": "007.py", "line": 12, "code": "def f():\n    return 1 < 3", "opts": {"a": [1]}, "force": True}
    for pieces in (chars(answer), [answer]):
        p = ToolCallParser("hermes", ["edit"], schemas=schemas)
        content = "".join(p.feed(piece).content for piece in pieces) + p.finish().content
        assert content == "I'll edit it.\n" and [(c.name, json.loads(c.arguments)) for c in p.calls] == [("edit", want)]
    # cut at the token limit inside a value: the parameters written so far
    p = ToolCallParser("hermes", ["edit"], schemas=schemas)
    p.feed(answer[: answer.index("def f")])
    p.finish(cut=True)
    assert [(c.name, json.loads(c.arguments)) for c in p.calls] == [("edit", {"path": "007.py", "line": 12, "code": ""})]


def test_a_call_written_with_arg_keys_as_glm_writes_them():
    schemas = {"add": {"type": "object", "properties": {"a": {"type": "integer"}, "note": {"type": "string"}}}}
    answer = "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n<arg_key>note</arg_key><arg_value>42</arg_value>\n</tool_call>"
    p = ToolCallParser("hermes", NAMES, schemas=schemas)
    assert "".join(p.feed(c).content for c in chars(answer)) + p.finish().content == ""
    assert [(c.name, json.loads(c.arguments)) for c in p.calls] == [("add", {"a": 1, "note": "42"})]


def test_gemma4_thinks_in_its_channel_and_writes_values_in_its_own_notation():
    from engine.chat_template import ChatTemplate
    from engine.tools import parse_tools, render_request
    from engine.tools.stream import ChatOutputParser
    from engine.types import ChatMessage, GenerationRequest

    # as Gemma 4's template: calls written '<|tool_call>call:' + name, thinking in '<|channel>thought'
    src = ("{% if tools %}{% endif %}{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content }}<turn|>\n{% endfor %}"
           "<|turn>model\n{% if not enable_thinking %}<|channel>thought\n<channel|>{% endif %}"
           "{# '<|tool_call>call:' #}")  # fmt: skip
    tools = parse_tools([{"type": "function", "function": {"name": "find", "parameters": {"type": "object"}}}])
    req = GenerationRequest(model="m", messages=(ChatMessage("user", "Go"),), tools=tools, template_kwargs=(("enable_thinking", True),))
    rendered = render_request(ChatTemplate(src), req)
    assert (rendered.tool_format, rendered.think_tags) == ("gemma4", ("<|channel>thought", "<channel|>"))
    out = ('<|channel>thought\nNeed a search.<channel|>Searching.<|tool_call>call:find{q:<|"|>a, "b"<|"|>,n:3,'
           'opts:{deep:true,tags:[<|"|>x<|"|>,1]},none:null}<tool_call|>')  # fmt: skip
    p = ChatOutputParser(rendered)
    pieces = [p.feed(c) for c in out] + [p.finish()]
    assert "".join(x.reasoning for x in pieces).strip() == "Need a search."
    assert "".join(x.content for x in pieces) == "Searching."
    want = {"q": 'a, "b"', "n": 3, "opts": {"deep": True, "tags": ["x", 1]}, "none": None}
    assert [(c.name, json.loads(c.arguments)) for c in p.calls] == [("find", want)]


def test_pythonic_calls_are_parsed_never_run():
    p = ToolCallParser("pythonic", ["find"])
    p.feed('<|tool_call_start|>[find(q="x", opts={"deep": true, "n": [1, null]})]<|tool_call_end|>')
    p.finish()
    assert [(c.name, json.loads(c.arguments)) for c in p.calls] == [("find", {"q": "x", "opts": {"deep": True, "n": [1, None]}})]
    for text in ("[find(q=__import__('os').system('x'))]", "[find(q=open('f'))]", "[find(*a)]", "find(" * 500):
        p = ToolCallParser("pythonic", ["find"])
        assert p.feed(f"<|tool_call_start|>{text}<|tool_call_end|>").content + p.finish().content and not p.calls
