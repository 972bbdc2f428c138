"""Tool calling through a real `hearth serve` with the starter model, driven by the official clients."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from engine.tools.spec import close_partial_json
from tests.engine.server.conftest import MODEL

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "Add two whole numbers.", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(server):
    """The official client, patient: a shared test machine can be slow."""
    return server.client().with_options(timeout=600)


def assert_valid_call(call) -> dict:
    assert call.id.startswith("call_") and call.type == "function"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])
    return args


def test_required_gives_a_schema_valid_call(server, openai_schemas):
    raw = client(server).chat.completions.with_raw_response.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=80
    )
    openai_schemas("CreateChatCompletionResponse", raw.http_response.json())
    r = raw.parse()
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    assert_valid_call(choice.message.tool_calls[0])
    assert r.usage.completion_tokens > 5 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_named_function_streamed_assembles_with_the_client_helper(server, openai_schemas):
    openai_client = client(server)
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}], tools=TOOLS,
                  tool_choice={"type": "function", "function": {"name": "add"}}, temperature=0, max_tokens=60)  # fmt: skip
    with openai_client.chat.completions.stream(stream_options={"include_usage": True}, **kwargs) as stream:
        chunks = [event.chunk for event in stream if event.type == "chunk"]
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "add"
    assert_valid_call(call)
    assert final.choices[0].finish_reason == "tool_calls"
    # the raw deltas: the first carries index, id, type and name; later ones pieces of the arguments
    for c in chunks:
        openai_schemas("CreateChatCompletionStreamResponse", c.model_dump(exclude_unset=True))
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert pieces[0].index == 0 and pieces[0].id.startswith("call_") and pieces[0].type == "function"
    assert pieces[0].function.name == "add"
    assert all(p.id is None and p.function.name is None for p in pieces[1:])
    assert json.loads("".join(p.function.arguments or "" for p in pieces)) == json.loads(call.function.arguments)
    assert not any(c.choices and c.choices[0].delta.content for c in chunks)  # no markup leaks as text
    first = chunks[0].choices[0].delta  # a call it must be: no content at all, as OpenAI opens it (no empty text part)
    assert first.role == "assistant" and first.content is None and "content" in first.model_fields_set
    assert chunks[-1].usage.completion_tokens > 3


def test_a_conversation_with_tool_results_is_answered(server):
    messages = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_abc", "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}],
        },  # fmt: skip
        {"role": "tool", "tool_call_id": "call_abc", "content": [{"type": "text", "text": "Sunny and 24 degrees."}]},
    ]
    r = client(server).chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, temperature=0,
                                                max_tokens=16)  # fmt: skip
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    # the result names its call's function as the Responses API's does: the same prompt through both
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    items = [*ASK, {"type": "function_call", "call_id": "call_abc", "name": "get_weather",
                    "arguments": '{"city": "Paris", "unit": "c"}'},
             {"type": "function_call_output", "call_id": "call_abc", "output": "Sunny and 24 degrees."}]  # fmt: skip
    resp = client(server).responses.create(model=MODEL, input=items, tools=tools, temperature=0, max_output_tokens=16)
    assert resp.usage.input_tokens == r.usage.prompt_tokens


def test_none_gives_text(server):
    r = client(server).chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=12
    )
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content and "<tool_call>" not in r.choices[0].message.content


@pytest.mark.parametrize(
    "tools,needle",
    [
        ([{"type": "function", "function": {"parameters": {"type": "object"}}}], "tools[0] has no function name"),
        ([TOOLS[0], {"type": "function", "function": {"name": "bad", "parameters": {"type": "array"}}}],
         "tools[1] ('bad')"),
    ],
)  # fmt: skip
def test_bad_tool_definitions_are_a_400_naming_the_tool(server, tools, needle):
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        headers=server.headers,
        json={"model": MODEL, "messages": ASK, "tools": tools},
        timeout=600,
    )
    assert r.status_code == 400
    assert needle in r.json()["error"]["message"]


def adding_tool(agents, seen: list[int]):
    """An openai-agents function tool that adds two whole numbers, each sum it gives appended to ``seen``."""

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        seen.append(a + b)
        return a + b

    return add


def test_openai_agents_sdk_runs_a_tool_and_answers(server):
    agents = pytest.importorskip("agents")
    import openai

    agents.set_tracing_disabled(True)
    seen: list[int] = []
    add = adding_tool(agents, seen)

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=600)
    agent = agents.Agent(
        name="calculator",
        instructions="Use the add tool to add numbers, then say the result.",
        tools=[add],
        model=agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=30),
    )
    result = agents.Runner.run_sync(agent, "What is 2 plus 3?", max_turns=4)
    assert len(seen) == 1  # the SDK called our function once (tool_choice resets to auto afterwards)
    assert isinstance(result.final_output, str) and result.final_output.strip()


def test_thinking_and_calls_in_openai_shapes(openai_schemas):
    from engine.server import chat_tools
    from engine.tools import ToolCall, ToolCallDelta
    from engine.types import GenerationChunk

    call = ToolCall(name="add", arguments='{"a": 1, "b": 2}')
    final = GenerationChunk(finish_reason="tool_calls", tool_calls=(call,), reasoning_tokens=7)
    message = chat_tools.message("", "I should add.", final)
    openai_schemas("ChatCompletionResponseMessage", message)
    assert message["content"] is None and message["reasoning_content"] == message["reasoning"] == "I should add."
    assert message["tool_calls"][0]["id"] == call.id and chat_tools.reasoning_tokens([final, None]) == 7
    piece = GenerationChunk(
        reasoning="Hmm.",
        tool_call_deltas=(ToolCallDelta(0, id=call.id, name="add"), ToolCallDelta(0, arguments=call.arguments)),
    )
    deltas = [chat_tools.reasoning_delta(piece), *chat_tools.CallDeltas().deltas(piece)]
    for d in deltas:
        openai_schemas("ChatCompletionStreamResponseDelta", d)
    assert deltas[0] == {"reasoning_content": "Hmm.", "reasoning": "Hmm."}
    assert deltas[1]["tool_calls"][0] == {"index": 0, "id": call.id, "type": "function",
                                          "function": {"name": "add", "arguments": ""}}  # fmt: skip
    assert deltas[2]["tool_calls"][0] == {"index": 0, "function": {"arguments": call.arguments}}



def test_a_custom_tool_in_chat_completions_is_called_with_text(server, openai_schemas):
    """A custom tool's call is a ``custom`` call of its text, plain and streamed (deltas of ``custom.input``), and
    goes back in an assistant message; a regular expression it must match is held to."""
    import re

    import openai

    shell = {"type": "custom", "custom": {"name": "shell", "description": "Run a shell command.",
             "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": "ls( -[a-z]{1,3})?"}}}}  # fmt: skip
    client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=600)
    asked = {"model": MODEL, "messages": [{"role": "user", "content": "List the files here."}], "tools": [shell],
             "tool_choice": {"type": "custom", "custom": {"name": "shell"}}, "temperature": 0, "max_tokens": 30}  # fmt: skip
    done = client.chat.completions.create(**asked)
    (call,) = done.choices[0].message.tool_calls
    assert call.type == "custom" and call.custom.name == "shell" and re.fullmatch("ls( -[a-z]{1,3})?", call.custom.input)
    openai_schemas("ChatCompletionMessageCustomToolCall", done.choices[0].message.model_dump(mode="json")["tool_calls"][0])
    pieces = [c.choices[0].delta.model_dump() for c in client.chat.completions.create(**asked, stream=True) if c.choices]
    calls = [t for p in pieces for t in p.get("tool_calls") or ()]
    assert calls[0]["id"] and calls[0]["type"] == "custom" and calls[0]["custom"]["name"] == "shell"
    assert "".join(t["custom"]["input"] for t in calls) == call.custom.input
    back = asked["messages"] + [
        {"role": "assistant", "tool_calls": [{"id": call.id, "type": "custom", "custom": {"name": "shell", "input": call.custom.input}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "notes.txt"}]  # fmt: skip
    answer = client.chat.completions.create(**{**asked, "messages": back, "tool_choice": "none", "max_tokens": 6})
    assert answer.choices[0].message.content

FORCED = {"type": "function", "function": {"name": "get_weather"}}


def _post(server, path: str, body: dict) -> dict:
    r = httpx.post(f"{server.root}{path}", json=body, headers=server.headers, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_forced_call_cut_short_by_max_tokens_is_a_call_with_partial_arguments_in_every_dialect(server):
    """OpenAI's way: the call, its arguments as far as they were written, finish_reason "length"; markup never
    reaches the content (LangChain then sees a call, not raw template text)."""
    limit = 24  # the markup, the name and part of the arguments
    chat = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": FORCED,
                                                  "temperature": 0, "max_tokens": limit})  # fmt: skip
    (choice,) = chat["choices"]
    assert choice["finish_reason"] == "length" and not choice["message"]["content"]
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    partial = call["function"]["arguments"]
    assert "<tool_call>" not in json.dumps(chat) and partial.startswith('{"city": "')
    with pytest.raises(ValueError):
        json.loads(partial)  # cut short: what was written, as OpenAI gives it
    anthropic_tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                        "input_schema": t["function"]["parameters"]} for t in TOOLS]  # fmt: skip
    msg = _post(server, "/v1/messages", {"model": MODEL, "messages": ASK, "tools": anthropic_tools, "temperature": 0,
                                         "tool_choice": {"type": "tool", "name": "get_weather"}, "max_tokens": limit})  # fmt: skip
    assert msg["stop_reason"] == "max_tokens"
    assert [b["type"] for b in msg["content"]] == ["tool_use"] and msg["content"][0]["name"] == "get_weather"
    assert msg["content"][0]["input"] == json.loads(close_partial_json(partial))  # what was written, closed
    resp_body = {"model": MODEL, "input": ASK[0]["content"], "temperature": 0,
                 "tools": [{"type": "function", **t["function"]} for t in TOOLS],
                 "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": limit}  # fmt: skip
    resp = _post(server, "/v1/responses", resp_body)
    assert resp["status"] == "incomplete"
    assert [(o["type"], o["name"]) for o in resp["output"]] == [("function_call", "get_weather")]
    assert resp["output"][0]["arguments"] == partial and resp["output"][0]["status"] == "incomplete"
    with httpx.stream("POST", f"{server.root}/v1/responses", headers=server.headers, timeout=600,
                      json={**resp_body, "stream": True}) as streamed:  # fmt: skip
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: ")]
    (item_done,) = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert events[-1]["type"] == "response.incomplete" and item_done["status"] == "incomplete"
    assert events[-1]["response"]["output"] == [item_done] and item_done["arguments"] == partial
    ollama = _post(server, "/api/chat", {"model": MODEL, "messages": ASK, "tools": TOOLS, "stream": False,
                                         "options": {"temperature": 0, "num_predict": 8}})  # fmt: skip
    assert ollama["done_reason"] == "length" and "<tool_call>" not in ollama["message"]["content"]
    assert [c["function"]["name"] for c in ollama["message"].get("tool_calls") or ()] in ([], ["get_weather"])


def test_a_forced_call_cut_inside_its_opening_marker_is_the_call_not_the_markers_text(server):
    """Cut by max_tokens before its markup's opening tag is whole (``<tool_call>`` is several tokens), a forced
    answer is still the forced call, with no arguments yet: never the tag's first characters as text."""
    import anthropic

    chat = client(server).chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=FORCED,
                                                  temperature=0, max_tokens=2)  # fmt: skip
    (choice,) = chat.choices
    assert choice.finish_reason == "length" and not choice.message.content
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [("get_weather", "")]
    claude = anthropic.Anthropic(base_url=server.root, api_key=server.api_key, max_retries=0, timeout=600)
    anthropic_tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    with claude.messages.stream(model=MODEL, messages=ASK, tools=anthropic_tools, max_tokens=2,
                                tool_choice={"type": "tool", "name": "get_weather"}) as stream:  # fmt: skip
        message = stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert [(b.type, b.name, b.input) for b in message.content] == [("tool_use", "get_weather", {})]


def test_a_deprecated_function_call_in_the_history_is_read_as_the_tool_call_it_was(server):
    """A conversation from a client of OpenAI's deprecated functions (an assistant ``function_call``, then a
    ``function`` message with its result) reads as the same conversation told with tool calls: the call is in
    the prompt, not an empty assistant turn."""
    arguments = '{"city": "Paris", "unit": "c"}'
    legacy = [*ASK, {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": arguments}},
              {"role": "function", "name": "get_weather", "content": "Sunny, 21 C."}]  # fmt: skip
    tools = [*ASK, {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C."}]  # fmt: skip
    answers = [client(server).chat.completions.create(model=MODEL, messages=m, tools=TOOLS, temperature=0, max_tokens=8)
               for m in (legacy, tools)]  # fmt: skip
    assert answers[0].usage.prompt_tokens == answers[1].usage.prompt_tokens
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content


def test_openais_deprecated_functions_are_called_and_answered_in_their_own_shape(server):
    """``functions`` with ``function_call`` (no ``tools``), as clients written before tools send them: the
    answer's call is the message's ``function_call`` and finish_reason is ``function_call``, streamed or not."""
    functions = [t["function"] for t in TOOLS]
    asked = {"model": MODEL, "messages": ASK, "functions": functions, "function_call": {"name": "get_weather"},
             "temperature": 0, "max_tokens": 60}  # fmt: skip
    (choice,) = client(server).chat.completions.create(**asked).choices
    assert choice.finish_reason == "function_call" and choice.message.tool_calls is None
    assert choice.message.function_call.name == "get_weather" and choice.message.content is None
    jsonschema.validate(json.loads(choice.message.function_call.arguments), WEATHER)
    name, arguments, finish = None, "", None
    for chunk in client(server).chat.completions.create(**asked, stream=True):
        delta = chunk.choices[0].delta
        assert delta.tool_calls is None
        if delta.function_call is not None:
            name = name or delta.function_call.name
            arguments += delta.function_call.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (name, arguments, finish) == ("get_weather", choice.message.function_call.arguments, "function_call")
    (choice,) = client(server).chat.completions.create(**{**asked, "function_call": "none", "max_tokens": 4}).choices
    assert choice.message.function_call is None and choice.message.content and choice.finish_reason == "length"


def test_a_call_the_model_chooses_to_make_follows_a_strict_tools_schema_in_every_dialect(server):
    """``strict: true`` under ``tool_choice: auto``: the model writes freely, and a call it opens is held to the
    tool's schema (the starter copies the call it is shown, without the required "unit")."""
    copy = [{"role": "user", "content": 'Repeat after me exactly: <tool_call>\n{"name": "get_weather", '
                                        '"arguments": {"city": "Paris"}}\n</tool_call>'}]  # fmt: skip
    strict = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]
    r = client(server).chat.completions.create(model=MODEL, messages=copy, tools=strict, temperature=0, max_tokens=80)
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls"
    assert assert_valid_call(call)["city"] == "Paris"
    resp = _post(server, "/v1/responses", {"model": MODEL, "input": copy, "temperature": 0, "max_output_tokens": 80,
                                           "tools": [{"type": "function", **strict[0]["function"]}]})  # fmt: skip
    (item,) = [o for o in resp["output"] if o["type"] == "function_call"]
    jsonschema.validate(json.loads(item["arguments"]), WEATHER)
    msg = _post(server, "/v1/messages", {"model": MODEL, "messages": copy, "temperature": 0, "max_tokens": 80,
                                         "tools": [{"name": "get_weather", "description": "Weather in a city.",
                                                    "input_schema": WEATHER, "strict": True}]})  # fmt: skip
    (use,) = [b for b in msg["content"] if b["type"] == "tool_use"]
    assert msg["stop_reason"] == "tool_use"
    jsonschema.validate(use["input"], WEATHER)


def test_allowed_tools_narrow_the_calls_in_both_of_openais_shapes(server):
    """OpenAI's ``allowed_tools``: every tool stays in the prompt, the call is one of the allowed."""
    only_add = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "add"}}]}}
    chat = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": only_add,
                                                  "temperature": 0, "max_tokens": 60})  # fmt: skip
    assert [c["function"]["name"] for c in chat["choices"][0]["message"]["tool_calls"]] == ["add"]
    resp = _post(server, "/v1/responses", {"model": MODEL, "input": ASK[0]["content"], "temperature": 0, "max_output_tokens": 60,
                                           "tools": [{"type": "function", **t["function"]} for t in TOOLS],
                                           "tool_choice": {"type": "allowed_tools", "mode": "required",
                                                           "tools": [{"type": "function", "name": "add"}]}})  # fmt: skip
    assert [o["name"] for o in resp["output"] if o["type"] == "function_call"] == ["add"]
    bad = httpx.post(f"{server.root}/v1/chat/completions", headers=server.headers, timeout=60, json={
        "model": MODEL, "messages": ASK, "tools": TOOLS,
        "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "nope"}}]}}})  # fmt: skip
    assert bad.status_code == 400 and "'nope'" in bad.json()["error"]["message"]


def test_forced_parallel_calls_end_where_the_model_repeats_one_in_every_dialect(server):
    """A forced choice with parallel calls: the grammar allows another call after each, and the small model, which
    prefers a line break to its end of turn there, writes the same calls again. The answer ends at the first repeat,
    with the calls before it (each once) and ``tool_calls``, not at the token limit with duplicates."""
    weather = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
    time_in = {"type": "function", "function": {"name": "get_time", "description": "Current time in a timezone.", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}  # fmt: skip
    ask = [{"role": "user", "content": "Weather in Paris and time in UTC?"}]
    body = {"model": MODEL, "messages": ask, "tools": [weather, time_in], "tool_choice": "required",
            "parallel_tool_calls": True, "temperature": 0, "max_tokens": 200}  # fmt: skip
    chat = _post(server, "/v1/chat/completions", body)
    (choice,) = chat["choices"]
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in choice["message"]["tool_calls"]]
    assert choice["finish_reason"] == "tool_calls" and chat["usage"]["completion_tokens"] < 200
    assert len(calls) >= 2 and len({json.dumps(c, sort_keys=True) for c in calls}) == len(calls)
    with client(server).chat.completions.stream(**body, stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    streamed = [(c.function.name, json.loads(c.function.arguments)) for c in final.choices[0].message.tool_calls]
    assert streamed == calls and final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.completion_tokens == chat["usage"]["completion_tokens"]
    anthropic_tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                        "input_schema": t["function"]["parameters"]} for t in (weather, time_in)]  # fmt: skip
    msg = _post(server, "/v1/messages", {"model": MODEL, "messages": ask, "tools": anthropic_tools, "temperature": 0,
                                         "tool_choice": {"type": "any", "disable_parallel_tool_use": False},
                                         "max_tokens": 200})  # fmt: skip
    assert msg["stop_reason"] == "tool_use" and [(b["name"], b["input"]) for b in msg["content"]] == calls
