"""OpenAI's Responses API on Hearth's port: the official client's responses.create / responses.stream,
and every object validated against the Responses schemas of OpenAI's spec."""

from __future__ import annotations

import json
import re
import time

import httpx
import jsonschema
import openai
import pytest

from tests.engine.server.conftest import MODEL

# Each streaming event's own schema in OpenAI's spec (ResponseStreamEvent is their union).
EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedEvent",
    "response.in_progress": "ResponseInProgressEvent",
    "response.output_item.added": "ResponseOutputItemAddedEvent",
    "response.content_part.added": "ResponseContentPartAddedEvent",
    "response.output_text.delta": "ResponseTextDeltaEvent",
    "response.output_text.done": "ResponseTextDoneEvent",
    "response.content_part.done": "ResponseContentPartDoneEvent",
    "response.output_item.done": "ResponseOutputItemDoneEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneEvent",
    "response.custom_tool_call_input.delta": "ResponseCustomToolCallInputDeltaEvent",
    "response.custom_tool_call_input.done": "ResponseCustomToolCallInputDoneEvent",
    "response.reasoning_text.delta": "ResponseReasoningTextDeltaEvent",
    "response.reasoning_text.done": "ResponseReasoningTextDoneEvent",
    "response.completed": "ResponseCompletedEvent",
    "response.incomplete": "ResponseIncompleteEvent",
    "response.failed": "ResponseFailedEvent",
}


def sdk(server) -> openai.OpenAI:
    """The official client, patient with a busy machine."""
    return openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=600)


def raw_events(server, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{server.base_url}/responses", json={**body, "stream": True}, headers=server.headers, timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def test_create_validates_and_reports_usage(server, openai_schemas):
    body = {"model": MODEL, "input": "Name three colours.", "instructions": "Be brief.", "max_output_tokens": 10, "temperature": 0}
    raw = httpx.post(f"{server.base_url}/responses", json=body, headers=server.headers, timeout=300).json()
    openai_schemas("Response", raw)
    assert raw["object"] == "response" and raw["id"].startswith("resp_") and raw["model"] == MODEL
    assert raw["status"] in ("completed", "incomplete") and raw["instructions"] == "Be brief."
    usage = raw["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] and 0 < usage["output_tokens"] <= 10

    resp = sdk(server).responses.create(model=MODEL, input="Name three colours.", instructions="Be brief.",
                                             max_output_tokens=10, temperature=0)  # fmt: skip
    assert resp.output_text == raw["output"][0]["content"][0]["text"]
    assert resp.output[0].type == "message" and resp.output[0].role == "assistant"


def test_stream_events_validate_and_the_sdk_assembles_them(server, openai_schemas):
    body = {"model": MODEL, "input": "Name three colours.", "max_output_tokens": 8, "temperature": 0}
    events = raw_events(server, body)
    for kind in dict.fromkeys(e["type"] for e in events):  # one of each kind: validating is slow on this spec
        openai_schemas(EVENT_SCHEMAS[kind], next(e for e in events if e["type"] == kind))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete" if events[-1]["response"]["status"] == "incomplete" else "response.completed"]  # fmt: skip
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")

    deltas, final = [], None
    with sdk(server).responses.stream(**body) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response  # max_output_tokens ends it as incomplete, which get_final_response refuses
        if final.status == "completed":
            assert stream.get_final_response().output_text == final.output_text
    assert "".join(deltas) == streamed == final.output_text
    assert final.usage.output_tokens == events[-1]["response"]["usage"]["output_tokens"]


def test_previous_response_id_continues_the_conversation(server):
    client = sdk(server)
    first = client.responses.create(model=MODEL, input="My name is Ada.", max_output_tokens=8, temperature=0)
    second = client.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=8, temperature=0)  # fmt: skip
    alone = client.responses.create(model=MODEL, input="What is my name?", max_output_tokens=8, temperature=0)
    # the earlier turn (question and answer) is part of the second prompt
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(first.id).output_text == first.output_text
    items = client.responses.input_items.list(first.id)
    assert [i.type for i in items.data] == ["message"]
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_input_items_are_listed_as_openai_lists_them_a_page_at_a_time(server, openai_schemas):
    client = sdk(server)
    said = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": [{"type": "input_text", "text": "Bye."}]},
            {"role": "user", "content": "Again."}]  # fmt: skip
    resp = client.responses.create(model=MODEL, input=said, max_output_tokens=2, temperature=0)
    listed = client.responses.input_items.list(resp.id, order="asc")
    assert [(i.role, i.content[0].type, i.content[0].text) for i in listed.data] == [
        ("system", "input_text", "Be brief."), ("user", "input_text", "Hi."), ("assistant", "output_text", "Hello."),
        ("user", "input_text", "Bye."), ("user", "input_text", "Again.")]  # fmt: skip
    assert all(i.id.startswith("msg_") and i.status == "completed" for i in listed.data)
    raw = httpx.get(f"{server.base_url}/responses/{resp.id}/input_items", headers=server.headers, timeout=60).json()
    openai_schemas("ResponseItemList", raw)
    first = client.responses.input_items.list(resp.id, order="asc", limit=2)
    assert [i.id for i in first.data] == [i.id for i in listed.data[:2]] and first.has_more
    rest = client.responses.input_items.list(resp.id, order="asc", limit=2, after=first.last_id)
    assert [i.id for i in rest.data] == [i.id for i in listed.data[2:4]] and rest.has_more
    # the SDK's pager walks every page
    assert [i.id for i in client.responses.input_items.list(resp.id, order="asc", limit=2)] == [i.id for i in listed.data]
    newest = client.responses.input_items.list(resp.id, limit=1)  # desc by default
    assert [i.id for i in newest.data] == [listed.data[-1].id]
    with pytest.raises(openai.BadRequestError):
        client.responses.input_items.list(resp.id, after="msg_nope")


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_forced_function_call_streamed_then_its_output_answered(server, openai_schemas):
    client = sdk(server)
    ask = "What is the weather in Paris?"
    body = {"model": MODEL, "input": ask, "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 60, "temperature": 0}  # fmt: skip
    events = raw_events(server, body)
    for kind in dict.fromkeys(e["type"] for e in events):
        openai_schemas(EVENT_SCHEMAS[kind], next(e for e in events if e["type"] == kind))
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    jsonschema.validate(json.loads(args), WEATHER["parameters"])
    openai_schemas("Response", events[-1]["response"])

    with client.responses.stream(**{**body, "tool_choice": "required"}) as stream:
        resp = stream.get_final_response()
    (call,) = [o for o in resp.output if o.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])  # assembled by the SDK from the deltas

    answer = client.responses.create(
        model=MODEL,
        previous_response_id=resp.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 C."}],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=6,
        temperature=0,
    )
    assert answer.output_text and answer.previous_response_id == resp.id
    assert not [o for o in answer.output if o.type == "function_call"]
    by_hand = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": ask}, {"type": "function_call", "call_id": "call_1", "name": "get_weather",
               "arguments": '{"city": "Paris"}'}, {"type": "function_call_output", "call_id": "call_1", "output": "Sunny."}],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=6,
        temperature=0,
    )  # fmt: skip
    # the same conversation given by hand renders about as long as the stored one (only ids and texts differ)
    assert by_hand.output_text and abs(by_hand.usage.input_tokens - answer.usage.input_tokens) < 15


def test_store_false_keeps_nothing(server):
    client = sdk(server)
    resp = client.responses.create(model=MODEL, input="Hello", max_output_tokens=4, store=False)
    assert resp.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    with pytest.raises(openai.BadRequestError) as missing:  # OpenAI's 400 and code for a response it does not have
        client.responses.create(model=MODEL, input="Again", previous_response_id=resp.id, max_output_tokens=4)
    assert missing.value.code == "previous_response_not_found"


def test_store_is_bounded():
    from engine.server.responses_store import ResponseStore, StoredResponse
    from engine.types import ChatMessage

    store = ResponseStore(max_responses=3, max_chars=10_000)
    for i in range(5):
        store.put(f"resp_{i}", StoredResponse({"id": f"resp_{i}"}, (ChatMessage("user", "hi"),), ()))
    assert len(store) == 3 and store.get("resp_0") is None and store.get("resp_4") is not None
    store.put("big", StoredResponse({}, (ChatMessage("user", "x" * 20_000),), ()))
    assert len(store) == 0  # one answer larger than the whole budget is not kept either


def test_a_stored_responses_events_count_toward_the_bound_once_kept():
    from engine.server.responses_store import ResponseStore, StoredResponse
    from engine.types import ChatMessage

    store = ResponseStore(max_responses=10, max_chars=10_000)
    plain = StoredResponse({"id": "resp_1", "output": ["y" * 3_000]}, (ChatMessage("user", "hi"),), ())
    store.put("resp_1", plain)
    with_events = plain.with_events((b"e" * 4_000, b"f" * 2_000), lost=False)
    # counted as a response built with its events is, without counting the response again
    assert with_events.chars == StoredResponse(plain.response, plain.conversation, (), with_events.events).chars
    store.put("resp_1", with_events)
    assert store.get("resp_1") is with_events and store.get("resp_1").events_lost is False
    store.put("resp_2", StoredResponse({}, (ChatMessage("user", "x" * 2_000),), ()))
    assert store.get("resp_1") is None and store.get("resp_2") is not None  # 9,000 + 2,000 characters: over the bound
    lost = plain.with_events((), lost=True)
    assert lost.events_lost and lost.chars == plain.chars


def test_json_schema_format(server):
    schema = {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "blue"]}},
              "required": ["colour"], "additionalProperties": False}  # fmt: skip
    resp = sdk(server).responses.create(
        model=MODEL,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Pick a colour as JSON."}]}],
        text={"format": {"type": "json_schema", "name": "pick", "schema": schema, "strict": True}},
        max_output_tokens=40,
        temperature=0,
    )
    jsonschema.validate(json.loads(resp.output_text), schema)


def test_a_schema_that_cannot_be_enforced_is_a_400_naming_text_format(server):
    """The error names the Responses field that holds the schema, not chat completions' response_format."""
    bad = {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}
    r = httpx.post(f"{server.base_url}/responses", json={"model": MODEL, "input": "hi", "text": {"format": bad}},
                   headers=server.headers, timeout=60)  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["param"] == "text.format", r.text


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": MODEL, "input": [{"type": "item_reference", "id": "x"}]}, 400),
        ({"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400),
        ({"model": MODEL, "input": [{"role": "wizard", "content": "hi"}]}, 400),
        ({"model": MODEL, "input": ""}, 400),
        ({"model": MODEL, "input": "hi", "max_output_tokens": 0}, 400),
        ({"model": MODEL, "input": "hi", "text": {"format": {"type": "yaml"}}}, 400),
        ({"model": MODEL, "input": "hi", "text": {"format": "json_object"}}, 400),
        ({"model": MODEL, "input": "hi", "temperature": 5}, 400),
        ({"model": MODEL, "input": "hi", "previous_response_id": "resp_missing"}, 400),  # OpenAI's, with its code
        ({"model": "no-such-model", "input": "hi"}, 404),
        ({"input": "hi"}, 400),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "regex"}}]}, 400),
        ({"model": MODEL, "input": [{"type": "custom_tool_call", "name": "shell", "input": "ls"}]}, 400),
        ({"model": MODEL, "input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"}, 400),
        ({"model": MODEL, "input": "hi", "tool_choice": "required"}, 400),
        ({"model": MODEL, "input": "hi", "reasoning": {"effort": "enormous"}}, 400),
        ({"model": MODEL, "input": [{"type": "function_call_output", "output": "x"}]}, 400),
    ],
)
def test_bad_requests_get_openai_errors_never_a_500(server, body, status):
    r = httpx.post(f"{server.base_url}/responses", json=body, headers=server.headers, timeout=300)
    assert r.status_code == status, r.text
    assert r.json()["error"]["message"].endswith(".")
    if "previous_response_id" in body:  # a client resends the whole conversation on this code
        assert r.json()["error"]["code"] == "previous_response_not_found"
        assert r.json()["error"]["param"] == "previous_response_id"


def test_a_picture_in_a_function_calls_output_is_read_not_dropped(server):
    """A tool's output may hold a picture (Codex's view_image gives one back so): it goes to the model as a picture
    in a message does, so a model without a projector refuses it instead of reading a marker as text."""
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="  # 1x1
    picture = {"type": "input_image", "image_url": f"data:image/png;base64,{png}"}
    called = [{"type": "function_call", "call_id": "call_1", "name": "look", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "It:"}, picture]}]  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="cannot read images"):
        sdk(server).responses.create(model=MODEL, input=called, max_output_tokens=4)  # pyright: ignore[reportArgumentType]


def test_truncation_auto_leaves_out_the_oldest_items_that_do_not_fit(server):
    """OpenAI's ``truncation: "auto"``: a conversation longer than the context loses items from its beginning (the
    instructions kept); left disabled, it is a 400."""
    items = [{"role": "user", "content": "word " * 2100}, {"role": "assistant", "content": "Noted."},
             {"role": "user", "content": "Say hi."}]  # fmt: skip
    asked = {"model": MODEL, "input": items, "instructions": "Be brief.", "max_output_tokens": 4, "temperature": 0}
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(server).responses.create(**asked)
    assert refused.value.code == "context_length_exceeded"
    resp = sdk(server).responses.create(**asked, truncation="auto")
    assert resp.truncation == "auto" and resp.status in ("completed", "incomplete")
    assert resp.usage is not None and resp.usage.input_tokens < 100
    assert sdk(server).responses.retrieve(resp.id).truncation == "auto"
    with pytest.raises(openai.BadRequestError, match="truncation"):
        sdk(server).responses.create(**{**asked, "input": "hi"}, truncation="sometimes")  # pyright: ignore[reportArgumentType]


def test_a_whole_answers_items_are_the_streamed_ones_and_the_limit_cuts_the_last():
    from engine.server.responses_routes import _output
    from engine.tools import ToolCall
    from engine.types import GenerationChunk

    def shape(text, reasoning, reason, calls=()):
        final = GenerationChunk(finish_reason=reason, tool_calls=tuple(calls))
        return [(o["type"], o["status"]) for o in _output(text, reasoning, final)]

    assert shape("", "Thinking about the sky", "length") == [("reasoning", "incomplete")]  # cut while thinking
    assert shape("Blue.", "Thinking", "length") == [("reasoning", "completed"), ("message", "incomplete")]
    assert shape("", "", "stop") == [("message", "completed")]  # an empty answer is one empty message
    call = ToolCall(name="f", arguments='{"a": 1')
    assert shape("", "", "length", [call]) == [("function_call", "incomplete")]
    assert shape("", "Thinking", "tool_calls", [call]) == [("reasoning", "completed"), ("function_call", "completed")]


def test_input_tokens_counts_what_create_would_read(server):
    """``client.responses.input_tokens.count``: the input as a response would render it, with nothing stored."""
    client = sdk(server)
    asked = {"model": MODEL, "input": "Name three colours.", "instructions": "Be brief."}
    counted = client.responses.input_tokens.count(**asked)
    assert counted.object == "response.input_tokens"
    made = client.responses.create(**asked, max_output_tokens=2, temperature=0, store=False)
    assert counted.input_tokens == made.usage.input_tokens and made.parallel_tool_calls is True  # OpenAI's default
    later = client.responses.input_tokens.count(model=MODEL, input="And three more?", instructions="Be brief.",
                                                previous_response_id=client.responses.create(**asked, max_output_tokens=2).id)  # fmt: skip
    assert later.input_tokens > counted.input_tokens
    wrong = httpx.put(f"{server.base_url}/responses/input_tokens", json=asked, headers=server.headers, timeout=60)
    assert wrong.status_code == 405
    assert wrong.json()["error"]["message"] == (
        "Invalid method (PUT /v1/responses/input_tokens): this endpoint takes POST; send one of those."
    )


def test_logprobs_come_with_the_text_when_include_asks_for_them(server, openai_schemas):
    """``include=["message.output_text.logprobs"]`` with ``top_logprobs``: every token of the answer with its
    log-probability, in the output text and in each streamed delta, the same as chat completions gives."""
    asked = {"model": MODEL, "input": "Name three colours.", "max_output_tokens": 6, "temperature": 0,
             "include": ["message.output_text.logprobs", "reasoning.encrypted_content"], "top_logprobs": 2}  # fmt: skip
    raw = httpx.post(f"{server.base_url}/responses", json=asked, headers=server.headers, timeout=300).json()
    openai_schemas("Response", raw)
    assert raw["top_logprobs"] == 2  # echoed, as OpenAI's response is
    part = raw["output"][0]["content"][0]
    assert "".join(lp["token"] for lp in part["logprobs"]) == part["text"] and len(part["logprobs"]) == 6
    assert all(lp["logprob"] <= 0 and len(lp["top_logprobs"]) == 2 for lp in part["logprobs"])
    chat = httpx.post(f"{server.base_url}/chat/completions", headers=server.headers, timeout=300, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 6,
        "temperature": 0, "logprobs": True, "top_logprobs": 2}).json()  # fmt: skip
    assert [lp["token"] for lp in chat["choices"][0]["logprobs"]["content"]] == [lp["token"] for lp in part["logprobs"]]
    events = raw_events(server, asked)
    deltas = [lp for e in events if e["type"] == "response.output_text.delta" for lp in e["logprobs"]]
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert [lp["token"] for lp in deltas] == [lp["token"] for lp in done["logprobs"]] == [lp["token"] for lp in part["logprobs"]]
    plain = sdk(server).responses.create(model=MODEL, input="Name three colours.", max_output_tokens=4, temperature=0)
    assert plain.output[0].content[0].logprobs == [] and plain.top_logprobs is None  # not asked for


def test_a_namespace_of_tools_is_offered_and_its_calls_name_it(server, openai_schemas):
    """Codex groups its MCP servers' tools in ``namespace`` tools: each of them is offered to the model, and a call
    comes back with its own name and its namespace (streamed too), then goes back in as input."""
    weather = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip
    # with OpenAI's hosted web search, as Codex sends it with every request: left out, as no local model can run it
    tools = [{"type": "namespace", "name": "forecast", "description": "Weather tools.", "tools": [weather]},
             {"type": "web_search", "external_web_access": False}]  # fmt: skip
    asked = {"model": MODEL, "input": "What is the weather in Paris?", "tools": tools, "tool_choice": "required",
             "max_output_tokens": 40, "temperature": 0}  # fmt: skip
    raw = httpx.post(f"{server.base_url}/responses", json=asked, headers=server.headers, timeout=300).json()
    call = next(item for item in raw["output"] if item["type"] == "function_call")
    assert (call["name"], call["namespace"]) == ("get_weather", "forecast") and "city" in json.loads(call["arguments"])
    assert [t["name"] for t in raw["tools"]] == ["get_weather"]
    events = raw_events(server, asked)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"]
    assert [(c["name"], c["namespace"]) for c in done] == [("get_weather", "forecast")]
    back = {**asked, "tool_choice": "none", "max_output_tokens": 8, "input": [
        {"type": "message", "role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": call["call_id"], "name": "get_weather", "namespace": "forecast", "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 C."}]}  # fmt: skip
    answer = httpx.post(f"{server.base_url}/responses", json=back, headers=server.headers, timeout=300)
    assert answer.status_code == 200 and answer.json()["output"][0]["type"] == "message"
    # the same tool in two namespaces: the model sees each by a name of its own
    twice = [*tools, {"type": "namespace", "name": "almanac", "description": "More.", "tools": [weather]}]
    both = httpx.post(f"{server.base_url}/responses", json={**asked, "tools": twice}, headers=server.headers, timeout=300).json()
    call = next(item for item in both["output"] if item["type"] == "function_call")
    assert call["name"] == "get_weather" and call["namespace"] in ("forecast", "almanac")


def test_a_custom_tool_is_called_with_text_and_its_output_goes_back_in(server, openai_schemas):
    """Custom (freeform) tools, as Codex's apply_patch is one: the call carries text (streamed as input deltas), a
    regular expression it must match is held to, and the call and its output go back in as input items."""
    shell = {"type": "custom", "name": "shell", "description": "Run a shell command.",
             "format": {"type": "grammar", "syntax": "regex", "definition": "ls( -[a-z]{1,3})?( [a-z]{1,8})?"}}  # fmt: skip
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    asked = {"model": MODEL, "input": "List the files here.", "tools": [shell, weather],
             "tool_choice": {"type": "custom", "name": "shell"}, "max_output_tokens": 30, "temperature": 0}  # fmt: skip
    resp = sdk(server).responses.create(**asked)
    (call,) = resp.output
    assert call.type == "custom_tool_call" and call.name == "shell" and call.id.startswith("ctc_")
    assert re.fullmatch(shell["format"]["definition"], call.input), call.input
    assert [t.type for t in resp.tools] == ["custom", "function"] and resp.tools[0].format.type == "grammar"
    events = raw_events(server, asked)
    for kind in dict.fromkeys(e["type"] for e in events):
        openai_schemas(EVENT_SCHEMAS[kind], next(e for e in events if e["type"] == kind))
    done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta")
    assert streamed == done["input"] == call.input
    openai_schemas("CustomToolCall", events[-1]["response"]["output"][0])
    back = {**asked, "tool_choice": "none", "max_output_tokens": 6, "input": [
        {"type": "message", "role": "user", "content": "List the files here."},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "shell", "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "notes.txt"}]}  # fmt: skip
    answer = sdk(server).responses.create(**back)
    assert answer.output[0].type == "message"
    follow = sdk(server).responses.create(model=MODEL, previous_response_id=resp.id, temperature=0, max_output_tokens=6,
                                          input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "notes.txt"}])  # fmt: skip
    assert follow.status in ("completed", "incomplete")


def test_a_stored_response_streams_again_from_any_event(server, openai_schemas):
    """``retrieve(id, stream=True)``: a stored response's events as its stream made them (every stored response is
    finished), numbered the same, after ``starting_after`` when given; cancelling a finished one is a 400."""
    asked = {"model": MODEL, "input": "Name three colours.", "max_output_tokens": 6, "temperature": 0}
    live = raw_events(server, asked)
    resp = sdk(server).responses.create(**asked)
    with httpx.stream("GET", f"{server.base_url}/responses/{resp.id}?stream=true", headers=server.headers, timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        replayed = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    for kind in dict.fromkeys(e["type"] for e in replayed):
        openai_schemas(EVENT_SCHEMAS[kind], next(e for e in replayed if e["type"] == kind))
    assert [e["sequence_number"] for e in replayed] == list(range(len(replayed)))
    assert list(dict.fromkeys(e["type"] for e in replayed)) == list(dict.fromkeys(e["type"] for e in live))
    assert "".join(e["delta"] for e in replayed if e["type"] == "response.output_text.delta") == resp.output_text
    assert replayed[-1]["response"] == httpx.get(f"{server.base_url}/responses/{resp.id}", headers=server.headers).json()
    later = list(sdk(server).responses.retrieve(resp.id, stream=True, starting_after=3))  # the SDK reads it too
    assert [e.sequence_number for e in later] == list(range(4, len(replayed)))
    with pytest.raises(openai.BadRequestError, match="Only responses created with background: true can be cancelled"):
        sdk(server).responses.cancel(resp.id)
    # a streamed response reads again from any of its own events, numbered as they went
    streamed = live[0]["response"]["id"]
    url = f"{server.base_url}/responses/{streamed}?stream=true&starting_after=4"
    again = [json.loads(line[6:]) for line in httpx.get(url, headers=server.headers).text.splitlines() if line.startswith("data: ")]
    assert again == live[5:]


def test_a_background_response_runs_on_and_is_polled_resumed_and_cancelled(server, openai_schemas):
    """``background: true``: the answer comes at once (queued), the response is generated in the worker and read by
    polling it or by streaming it, a stream that was dropped goes on from its last event, and ``cancel`` ends one."""
    client = sdk(server)
    asked = {"model": MODEL, "input": "Name three colours.", "max_output_tokens": 8, "temperature": 0}
    raw = httpx.post(f"{server.base_url}/responses", json={**asked, "background": True}, headers=server.headers, timeout=300).json()
    openai_schemas("Response", raw)
    assert raw["status"] == "queued" and raw["background"] is True and raw["output"] == []
    polled = client.responses.retrieve(raw["id"])
    while polled.status in ("queued", "in_progress"):
        polled = client.responses.retrieve(raw["id"])
    assert polled.status in ("completed", "incomplete") and polled.background is True
    assert polled.output_text == client.responses.create(**asked).output_text  # the same answer as in the foreground

    # streamed in the background: the client leaves after four events and comes back for the rest
    stream = client.responses.create(**asked, background=True, stream=True)
    first = []
    for event in stream:
        first.append(event)
        if len(first) == 4:
            break
    stream.close()
    rid = first[0].response.id
    assert [(e.type, e.response.status) for e in first[:2]] == [("response.created", "queued"), ("response.in_progress", "in_progress")]
    rest = list(client.responses.retrieve(rid, stream=True, starting_after=first[-1].sequence_number))
    assert [e.sequence_number for e in first + rest] == list(range(len(first) + len(rest)))
    assert rest[-1].type in ("response.completed", "response.incomplete")
    done = client.responses.retrieve(rid)
    assert "".join(e.delta for e in first + rest if e.type == "response.output_text.delta") == done.output_text == polled.output_text
    again = list(client.responses.retrieve(rid, stream=True))  # once it has ended: the very events it sent
    assert [(e.type, e.sequence_number) for e in again] == [(e.type, e.sequence_number) for e in first + rest]
    assert [e.sequence_number for e in client.responses.retrieve(rid, stream=True, starting_after=-5)] == list(range(len(again)))
    assert client.responses.cancel(rid).status == done.status  # it has ended: cancelling changes nothing

    # a long one, cancelled: it ends with what it had made, and frees its slot
    long = client.responses.create(model=MODEL, input="Write a long story about a cat.", max_output_tokens=2000, temperature=0,
                                   background=True)  # (greedy, it runs to its limit)
    with pytest.raises(openai.BadRequestError, match="still being generated"):
        client.responses.create(model=MODEL, input="Go on.", previous_response_id=long.id, max_output_tokens=4)
    while not client.responses.retrieve(long.id).output_text:  # polled as it runs: its text so far
        time.sleep(0.05)
    cancelled = client.responses.cancel(long.id)
    assert cancelled.status == "cancelled" and client.responses.retrieve(long.id).status == "cancelled"
    assert cancelled.output_text and cancelled.output[-1].status == "incomplete"
    assert client.responses.cancel(long.id).status == "cancelled"
    told = list(client.responses.retrieve(long.id, stream=True))  # its stream ends with its open item closed
    assert told[0].type == "response.created" and told[-1].type == "response.output_item.done"
    assert told[-1].item.status == "incomplete" and [e.sequence_number for e in told] == list(range(len(told)))
    openai_schemas("Response", httpx.get(f"{server.base_url}/responses/{long.id}", headers=server.headers).json())
    deleted = client.responses.create(model=MODEL, input="Write a long story about a dog.", max_output_tokens=2000, background=True)
    client.responses.delete(deleted.id)  # deleting a running one cancels it first
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(deleted.id)
    deadline = time.monotonic() + 60  # the engine lets a sequence go at its next step; the model is released
    while (stats := httpx.get(f"{server.root}/api/stats", headers=server.headers).json()["models"][MODEL])["running"] or stats["in_use"]:
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)
    assert stats["waiting"] == 0

    with pytest.raises(openai.BadRequestError, match="needs 'store': true"):
        client.responses.create(**asked, background=True, store=False)
    nulls = {**asked, "background": None, "store": None, "stream": None}  # null: each one's default, as OpenAI's spec says
    plain = httpx.post(f"{server.base_url}/responses", json=nulls, headers=server.headers, timeout=300).json()
    assert plain["status"] in ("completed", "incomplete") and plain["background"] is False and plain["store"] is True


def test_a_burst_of_background_responses_is_held_to_the_cap(server):
    """Background responses count from the moment they are taken: of a burst of 24 at once, 16 run and the rest are
    told to wait (a 429 that says why), however the requests interleave while their models start."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.server.responses_routes import MAX_BACKGROUND

    body = {"model": MODEL, "input": "Write a long story about the sea.", "max_output_tokens": 2000, "background": True}

    def create(_):
        return httpx.post(f"{server.base_url}/responses", json=body, headers=server.headers, timeout=300)

    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(create, range(24)))
    taken = [a.json()["id"] for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    try:
        assert len(taken) == MAX_BACKGROUND == 16
        assert all(a.status_code == 429 and "background responses are already running" in a.text for a in refused)
    finally:
        for rid in taken:
            httpx.post(f"{server.base_url}/responses/{rid}/cancel", headers=server.headers, timeout=60)
    deadline = time.monotonic() + 60
    while (stats := httpx.get(f"{server.root}/api/stats", headers=server.headers).json()["models"][MODEL])["running"] or stats["waiting"]:
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)
