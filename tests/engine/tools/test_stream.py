"""A chat stream split into thinking, answer and calls, with tags split across tokens."""

from __future__ import annotations

from engine.chat_template import ChatTemplate
from engine.tools import ReasoningSplitter, RenderedChat, parse_stream, parse_tools, split_reasoning
from engine.tools.render import render_request
from engine.types import GenerationChunk, GenerationRequest, as_messages
from tests.engine.tools.templates import HERMES


def chunks(pieces: list[str]):
    for p in pieces:
        yield GenerationChunk(text=p, token_ids=(1,))
    yield GenerationChunk(finish_reason="stop", completion_tokens=len(pieces), prompt_tokens=5)


def test_think_tags_split_across_tokens():
    pieces = ["<", "th", "ink", ">", "The user", " wants 4.", "</", "thi", "nk", ">", "\n\n", "It is", " 4."]
    out = list(parse_stream(chunks(pieces), RenderedChat(prompt="")))
    assert "".join(c.reasoning for c in out) == "The user wants 4."
    assert "".join(c.text for c in out) == "It is 4."
    assert out[-1].finish_reason == "stop" and out[-1].reasoning_tokens == 10


def test_thinking_opened_by_the_prompt():
    out = list(parse_stream(chunks(["hmm, ", "two", "</think>", "Two."]), RenderedChat(prompt="", thinking_started=True)))
    assert "".join(c.reasoning for c in out) == "hmm, two"
    assert "".join(c.text for c in out) == "Two."


def test_unfinished_thinking_stays_reasoning_and_plain_answers_pass():
    assert split_reasoning("<think>still going", started=False).reasoning == "still going"
    s = ReasoningSplitter()
    assert s.feed("Hello <think> is a tag").content + s.flush().content == "Hello <think> is a tag"


def test_thinking_then_a_tool_call_ends_with_finish_reason_tool_calls():
    req = GenerationRequest(
        model="m",
        messages=as_messages([{"role": "user", "content": "Weather?"}]),
        tools=parse_tools([{"type": "function", "function": {"name": "get_weather"}}]),
    )
    rendered = render_request(ChatTemplate(HERMES), req)
    text = '<think>Need the tool.</think>\n<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'
    out = list(parse_stream(chunks([text[i : i + 4] for i in range(0, len(text), 4)]), rendered))
    assert "".join(c.text for c in out) == ""
    assert "".join(c.reasoning for c in out) == "Need the tool."
    final = out[-1]
    assert final.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("get_weather", "{}")]
    assert sum(len(c.tool_call_deltas) for c in out) == 2


def test_an_answer_that_repeats_a_call_ends_before_it():
    """The repeated call, and all after it, is left out; the answer says ``tool_calls`` however the generation
    ended (its reader cancels it, see engine.backends.runtime), with the generation's counts."""
    from engine.tools import ChatStreamParser

    req = GenerationRequest(
        model="m",
        messages=as_messages([{"role": "user", "content": "Weather and sum?"}]),
        tools=parse_tools([{"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "add"}}]),
    )
    rendered = render_request(ChatTemplate(HERMES), req)
    one = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    two = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
    again = '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>\nand some text'
    for ending in ("length", "cancelled", "stop"):
        parser = ChatStreamParser(rendered)
        text = one + two + again
        out = [parser.feed(GenerationChunk(text=text[i : i + 5], token_ids=(1,))) for i in range(0, len(text), 5)]
        assert parser.ending
        out.append(parser.feed(GenerationChunk(text="more", token_ids=(1,))))
        out.append(parser.feed(GenerationChunk(finish_reason=ending, completion_tokens=40, prompt_tokens=5)))
        final = out[-1]
        assert final.finish_reason == "tool_calls" and final.completion_tokens == 40
        assert [(c.name, c.arguments) for c in final.tool_calls] == [("get_weather", '{"city": "Paris"}'), ("add", '{"a": 1, "b": 2}')]
        assert "".join(c.text for c in out) == "" and {d.index for c in out for d in c.tool_call_deltas} == {0, 1}
    other = ChatStreamParser(rendered)  # the same tool with other arguments is another call
    text = one + one.replace("Paris", "Lyon")
    [other.feed(GenerationChunk(text=text[i : i + 5], token_ids=(1,))) for i in range(0, len(text), 5)]
    assert not other.ending
    assert len(other.feed(GenerationChunk(finish_reason="stop")).tool_calls) == 2
