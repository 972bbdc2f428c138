"""A call the model chooses to make (``tool_choice: auto``) to a ``strict`` tool follows its schema from the
moment the model opens it, on llama.cpp (GBNF) and the paged engine (llguidance); text around it stays free."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.errors import SchemaTooComplex
from engine.tools import parse_tool_choice, parse_tools
from engine.tools.call_watch import CallWatch
from engine.tools.constraint import strict_call_constraint, tool_call_constraint
from engine.types import ChatMessage, GenerationRequest, SamplingParams

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}


def tools(strict: bool = True, *more: dict):
    fn = {"name": "get_weather", "description": "Get the weather in a city", "parameters": WEATHER, "strict": strict}
    return parse_tools([{"type": "function", "function": fn}, *more])


# The starter model copies the call it is shown, without the required "unit" (and writes it twice): the opening
# is the model's own choice, and what follows it is held to the schema only when the tool is strict.
COPY = 'Repeat after me exactly: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def ask(text: str, offered, max_tokens: int = 80, **kw) -> GenerationRequest:
    return GenerationRequest(model="s", messages=(ChatMessage("user", text),), tools=offered,
                             tool_choice=parse_tool_choice("auto", offered),
                             params=SamplingParams(temperature=0, max_tokens=max_tokens), **kw)  # fmt: skip


# -- where a call opens ---------------------------------------------------------------------------------


def test_the_watch_finds_an_opening_split_across_tokens_and_gives_the_text_from_it_on():
    watch = CallWatch("<tool_call>", ("<think>", "</think>"))
    assert [watch.feed(p) for p in (b"Sure.", b" <", b"tool", b"_", b"call")] == [None] * 5
    assert watch.feed(b'>\n{"') == b'<tool_call>\n{"'
    assert watch.feed(b"<tool_call>") is None  # spent: one opening starts the grammar


def test_an_opening_in_the_thinking_is_thought_not_written():
    watch = CallWatch("<tool_call>", ("<think>", "</think>"))
    assert watch.feed(b"<think>I could write <tool_call> here") is None
    assert watch.feed(b"</th") is None and watch.feed(b"ink>ok <tool_") is None
    assert watch.feed(b"call>") == b"<tool_call>"
    # a prompt that opened the thinking: the answer starts in it
    started = CallWatch("<tool_call>", ("<think>", "</think>"), thinking=True)
    assert started.feed(b"<tool_call>") is None and started.feed(b"</think><tool_call>") == b"<tool_call>"


def test_the_watch_keeps_a_few_bytes_whatever_the_answer():
    watch = CallWatch("<tool_call>", ("<think>", "</think>"))
    for _ in range(2000):
        assert watch.feed(b"words and more words ") is None
    assert len(watch.tail) < len(b"<tool_call>")


# -- which requests hold calls to a schema ---------------------------------------------------------------


def test_only_auto_with_a_strict_tool_in_a_family_with_a_written_opening_is_held():
    strict, loose = tools(True), tools(False)
    auto = parse_tool_choice("auto", strict)
    held = strict_call_constraint("hermes", strict, auto)
    assert held is not None and held.trigger == "<tool_call>" and tool_call_constraint("hermes", strict, auto) is None
    assert strict_call_constraint("generic", strict, None) is not None  # no tool_choice is auto
    assert strict_call_constraint("hermes", loose, auto) is None
    assert strict_call_constraint("hermes", strict, parse_tool_choice("required", strict)) is None  # forced: its own
    assert strict_call_constraint("hermes", strict, parse_tool_choice("none", strict)) is None
    assert strict_call_constraint("llama3", strict, auto) is None  # opens with a control token or bare JSON


def test_a_tool_that_is_not_strict_beside_a_strict_one_takes_any_object():
    other = {"type": "function", "function": {"name": "note", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
    offered = tools(True, other)
    held = strict_call_constraint("hermes", offered, parse_tool_choice("auto", offered))
    assert held is not None
    schema = held.call_schema()
    jsonschema.validate({"name": "note", "arguments": {"anything": [1, "two"]}}, schema)
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}, schema)
    for bad in ({"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "other", "arguments": {}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_a_strict_tool_whose_schema_makes_no_grammar_leaves_the_call_free_and_a_forced_one_is_refused(llama_backend):
    deep: dict = {"type": "object", "properties": {}}
    node = deep
    for _ in range(60):  # deeper than a grammar is made for (32), within what a template is given (128 levels)
        node["properties"]["x"] = {"type": "object", "properties": {}}
        node = node["properties"]["x"]
    offered = parse_tools([{"type": "function", "function": {"name": "deep", "parameters": deep, "strict": True}}])
    held = strict_call_constraint("hermes", offered, parse_tool_choice("auto", offered))
    assert held is not None and [(t.name, t.strict, dict(t.parameters)) for t in held.tools] == [
        ("deep", False, {"type": "object", "additionalProperties": True})]  # its name held, its arguments free
    with pytest.raises(SchemaTooComplex):  # a call the request forces must be held
        tool_call_constraint("hermes", offered, parse_tool_choice("required", offered))
    # over no bound, but no grammar the converter can write (a lookahead): answered, the call free
    lookahead = {"type": "object", "properties": {"pw": {"type": "string", "pattern": "^(?=.*[A-Z]).{8,}$"}}}
    odd = parse_tools([{"type": "function", "function": {"name": "login", "parameters": lookahead, "strict": True}}])
    chunks = list(llama_backend.stream(ask("Hi, how are you?", odd, max_tokens=8)))
    assert chunks[-1].finish_reason in ("stop", "length") and chunks[-1].error is None


# -- llama.cpp ------------------------------------------------------------------------------------------


def test_llama_cpp_holds_a_call_the_model_opens_to_the_strict_schema(llama_backend):
    final = list(llama_backend.stream(ask(COPY, tools(True))))[-1]
    assert final.finish_reason == "tool_calls"
    (call,) = final.tool_calls
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_calls_the_model_chooses_may_be_several_unless_the_request_says_one():
    from engine.chat_template import ChatTemplate
    from engine.tools.render import render_request

    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    for said, parallel in ((None, True), (True, True), (False, False)):
        req = ask("hi", tools(True), parallel_tool_calls=said)
        held = render_request(template, req).strict_calls
        assert held is not None and held.parallel is parallel


def test_llama_cpp_leaves_a_call_to_a_tool_that_is_not_strict_as_the_model_writes_it(llama_backend):
    final = list(llama_backend.stream(ask(COPY, tools(False))))[-1]
    assert final.tool_calls and json.loads(final.tool_calls[0].arguments) == {"city": "Paris"}


def test_llama_cpp_answers_in_text_when_the_model_opens_no_call(llama_backend):
    chunks = list(llama_backend.stream(ask("Hi, how are you?", tools(True), max_tokens=24)))
    assert chunks[-1].tool_calls in ((), None) and "".join(c.text for c in chunks).strip()


def test_the_llama_cpp_grammar_starts_at_the_opening_and_refuses_what_is_no_call(llama_backend):
    from engine.backends.llamacpp.sampler import SequenceSampler, tool_call_grammar

    model = llama_backend.model
    offered = tools(True)
    held = strict_call_constraint("generic", offered, parse_tool_choice("auto", offered))
    assert held is not None

    def after(text: str) -> SequenceSampler:
        s = SequenceSampler(model, SamplingParams(temperature=0), tool_call_grammar(held), watch=CallWatch(held.trigger))
        for t in model.tokenize(text, parse_special=True):
            if s.grammar is not None:  # held: what the model writes next goes through the grammar
                assert s._offer(s.grammar, t)
            elif s._watch is not None:
                s._observe(t)
        return s

    [brace] = model.tokenize("{", parse_special=True)
    hello = model.tokenize("Hello", parse_special=True)[0]
    free = after("Let me look that up.")
    assert free.grammar is None and free._dormant is not None  # still free: no call opened
    held_now = after("Let me look. <tool_call>\n")
    assert held_now.grammar is not None
    assert held_now._allowed(held_now.grammar, brace, 0.0) and not held_now._allowed(held_now.grammar, hello, 0.0)
    prose = after("Write `<tool_call>` tags")  # an opening the grammar cannot take (a backtick after it): free
    assert prose.grammar is None and prose._dormant is None
    for s in (free, held_now, prose):
        s.close()


# -- the paged engine (llguidance) ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paged(starter_path):
    pytest.importorskip("torch")
    from engine.backends.base import LoadOptions, ModelSpec, PagedOptions
    from engine.backends.paged import PagedBackend

    backend = PagedBackend(process=True)  # as `hearth serve` runs it: the grammar is built in the engine's process
    backend.load(ModelSpec(name="s", path=starter_path),
                 LoadOptions(n_ctx=1024, n_seq_max=2, paged=PagedOptions(num_kv_blocks=128, device="cpu")))  # fmt: skip
    yield backend
    backend.close()


def test_the_paged_engine_holds_a_call_the_model_opens_to_the_strict_schema(paged):
    final = list(paged.stream(ask(COPY, tools(True))))[-1]
    assert final.finish_reason == "tool_calls"
    (call,) = final.tool_calls
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_the_llguidance_matcher_waits_for_the_opening(starter_path):
    pytest.importorskip("llguidance")
    from engine.gguf import read_metadata, vocabulary_from_gguf
    from engine.tools.guidance import GrammarMatcher, grammar_for, vocab_for

    vocabulary = vocabulary_from_gguf(starter_path, read_metadata(starter_path))
    offered = tools(True)
    held = strict_call_constraint("generic", offered, parse_tool_choice("auto", offered))
    grammar = grammar_for(held, None)
    assert grammar is not None

    def after(text: str) -> GrammarMatcher:
        m = GrammarMatcher(vocab_for(vocabulary), grammar, watch=CallWatch(held.trigger))
        for t in vocabulary.encode(text, parse_special=True):
            m.consume(t)
        return m

    brace = vocabulary.encode('{"', parse_special=True)[0]  # the call object's start, as llguidance tokenizes it
    hello = vocabulary.encode("Hello", parse_special=True)[0]
    free = after("Let me look that up.")
    assert not free.active and not free.done
    held_now = after("Let me look. <tool_call>\n")
    assert held_now.active
    mask = held_now.allowed()
    assert mask[brace] and not mask[hello]
    prose = after("Write `<tool_call>` tags")  # an opening the grammar cannot take: free from there
    assert not prose.active and prose.watch is None


def test_a_request_waiting_for_a_call_to_open_keeps_the_batched_sampling_path(paged_backend, monkeypatch):
    """Until its call opens, a strict request's rows are sampled with everyone else's in one batch (a grammar row
    would send the whole step down the per-request path); from the opening on, its grammar holds."""
    backend = paged_backend  # the session's, in this process: its runner can be watched
    runner = backend._require_loop().loaded.engine.runner
    batched = []
    sample = runner.sample
    monkeypatch.setattr(runner, "sample", lambda batch: batched.append(1) or sample(batch))
    chunks = list(backend.stream(ask("Hi, how are you?", tools(True), max_tokens=12)))
    assert not chunks[-1].tool_calls and len(batched) >= 10  # every decode step batched
    final = list(backend.stream(ask(COPY, tools(True))))[-1]
    (call,) = final.tool_calls
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert not runner.rows.watching


def test_a_forced_calls_bare_json_is_a_call_beside_a_response_format_and_a_free_answers_json_is_not():
    from engine.chat_template import ChatTemplate
    from engine.tools.render import render_request
    from engine.types import ResponseFormat

    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    offered = tools(False)
    forced = GenerationRequest(model="s", messages=(ChatMessage("user", "hi"),), tools=offered,
                               tool_choice=parse_tool_choice("required", offered), response_format=ResponseFormat(type="json_object"))  # fmt: skip
    assert render_request(template, forced).bare_calls
    free = GenerationRequest(model="s", messages=(ChatMessage("user", "hi"),), tools=offered, response_format=ResponseFormat(type="json_object"))
    assert not render_request(template, free).bare_calls


def test_a_strict_tool_no_grammar_can_hold_leaves_the_others_held(llama_backend, paged):
    odd = {"type": "function", "function": {"name": "set_password", "strict": True, "parameters": {
        "type": "object", "properties": {"password": {"type": "string", "pattern": "^(?=.*[A-Z]).{8,}$"}},
        "required": ["password"], "additionalProperties": False}}}  # fmt: skip
    for backend in (llama_backend, paged):
        final = list(backend.stream(ask(COPY, tools(True, odd))))[-1]
        (call,) = final.tool_calls
        assert call.name == "get_weather"
        jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_allowed_tools_under_auto_hold_a_call_to_the_tools_listed(llama_backend):
    time_tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    offered = tools(False, time_tool)
    choice = parse_tool_choice({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "get_time"}}]}}, offered)  # fmt: skip
    req = GenerationRequest(model="s", messages=(ChatMessage("user", COPY),), tools=offered, tool_choice=choice,
                            params=SamplingParams(temperature=0, max_tokens=80))  # fmt: skip
    chunks = list(llama_backend.stream(req))
    assert [c.name for c in chunks[-1].tool_calls] == ["get_time"]  # the model named get_weather; the grammar did not
    assert "<tool_call>" not in "".join(c.text for c in chunks)

