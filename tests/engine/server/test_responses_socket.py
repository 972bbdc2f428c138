"""The Responses API's WebSocket mode (ws://host/v1/responses), through the openai SDK's ``responses.connect()``, the
Agents SDK's websocket transport, and a plain WebSocket client for what the SDKs never send."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.engine.server.conftest import MODEL
from tests.engine.server.test_tool_calls import adding_tool

ASK = [{"role": "user", "content": "Name a colour."}]
ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


def _url(server) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/responses"


def _socket(server, **headers: str):
    return connect(_url(server), additional_headers={**server.headers, **headers}, open_timeout=30, max_size=None)


def _until_end(ws, lane: str | None = None) -> list[dict]:
    """The events up to the response's last (or an error), of one lane when ``lane`` is given."""
    events = []
    while True:
        event = json.loads(ws.recv(timeout=300))
        if lane is not None and event.get("stream_id") != lane:
            continue
        events.append(event)
        if event["type"] in ENDS:
            return events


def _create(ws, **fields) -> None:
    ws.send(json.dumps({"type": "response.create", "model": MODEL, "temperature": 0, "max_output_tokens": 8, **fields}))


def test_the_sdk_continues_a_conversation_kept_for_the_connection_and_answers_as_a_post_does(server):
    client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=120)
    posted = client.responses.create(model=MODEL, input=ASK, temperature=0, max_output_tokens=8, store=False)
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input=ASK, temperature=0, max_output_tokens=8, store=False)
        kinds, deltas, first = [], [], None
        for event in conn:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            if event.type in ENDS:
                first = event.response
                break
        assert first is not None and kinds[:2] == ["response.created", "response.in_progress"]
        assert first.output_text == posted.output_text == "".join(deltas)  # the same answer, greedy
        # the next turn sends only its new item: the connection kept the first (store: false keeps it nowhere else)
        conn.response.create(model=MODEL, previous_response_id=first.id, temperature=0, max_output_tokens=8, store=False,
                             input=[{"role": "user", "content": "And another?"}])  # fmt: skip
        second = next(e for e in conn if e.type in ENDS)
        assert second.type in ("response.completed", "response.incomplete"), second
        assert second.response.previous_response_id == first.id
        assert second.response.usage.input_tokens > first.usage.input_tokens + 4  # it read the first turn too
    with pytest.raises(openai.BadRequestError):  # kept for that connection alone
        client.responses.create(model=MODEL, previous_response_id=first.id, input="Hi", max_output_tokens=4)


def test_lanes_run_at_once_each_event_names_its_lane_and_a_connection_survives_its_errors(server):
    with _socket(server) as ws:
        ws.send("{not json")
        bad = json.loads(ws.recv(timeout=30))
        assert bad["type"] == "error" and bad["status"] == 400 and "not valid JSON" in bad["error"]["message"]
        ws.send(json.dumps({"type": "session.update"}))
        assert "'session.update'" in json.loads(ws.recv(timeout=30))["error"]["message"]
        _create(ws, input="Hi", background=True)
        assert json.loads(ws.recv(timeout=30))["error"]["param"] == "background"
        ws.send(json.dumps({"type": "response.create", "input": "Hi"}))  # no model
        missing = json.loads(ws.recv(timeout=30))
        assert missing["status"] == 400 and missing["error"]["param"] == "model"
        _create(ws, input="Hi", model="no-such-model", stream_id="x")
        unknown = json.loads(ws.recv(timeout=30))
        assert unknown["status"] == 404 and unknown["stream_id"] == "x"
        ws.send(json.dumps({"type": "response.steer", "previous_response_id": "resp_1", "input": "faster"}))
        steer = json.loads(ws.recv(timeout=30))
        assert steer["type"] == "response.steer.failed" and steer["error"]["code"] == "steering_not_supported"
        ws.send('{"type": "response.create", "stream_id": "L\xed\xa0\x80"}'.encode("latin-1"))  # not UTF-8
        assert json.loads(ws.recv(timeout=30))["error"]["code"] == "invalid_json"
        # two lanes at once, then a second response in the first lane, which waits for the first's end, and an
        # error in its turn between them
        _create(ws, input="Say hello.", stream_id="a")
        _create(ws, input="Say goodbye.", stream_id="b")
        _create(ws, input="Say hi.", stream_id="a", background=True)
        _create(ws, input="Say thanks.", stream_id="a")
        events: dict[str, list[dict]] = {"a": [], "b": []}
        ends = 0
        while ends < 4:
            event = json.loads(ws.recv(timeout=300))
            events[event["stream_id"]].append(event)
            ends += event["type"] in ENDS
    a_ends = [e["type"] for e in events["a"] if e["type"] in ("response.created", *ENDS)]
    assert a_ends[0] == a_ends[3] == "response.created" and a_ends[2] == "error", a_ends  # each in its turn
    a_ids = [e["response"]["id"] for e in events["a"] if e["type"] in ("response.created", *ENDS) and "response" in e]
    assert len(a_ids) == 4 and a_ids[0] == a_ids[1] and a_ids[2] == a_ids[3] != a_ids[0]  # one after the other
    assert [e["type"] for e in events["b"]][-1] in ("response.completed", "response.incomplete")


def test_generate_false_prepares_a_turn_that_the_next_continues_from(server):
    with _socket(server) as ws:
        _create(ws, input=ASK, store=False, generate=False, instructions="Be brief.")
        events = _until_end(ws)
        assert [e["type"] for e in events] == ["response.created", "response.completed"]
        done = events[-1]["response"]
        assert done["output"] == [] and done["usage"]["output_tokens"] == 0 and done["usage"]["input_tokens"] > 5
        _create(ws, input=[], previous_response_id=done["id"], store=False)
        answer = _until_end(ws)[-1]
        assert answer["type"] in ("response.completed", "response.incomplete"), answer
        assert answer["response"]["output"][0]["type"] == "message"


def test_prewarm_prepares_without_an_answer_as_generate_false_does(server):
    with _socket(server) as ws:
        _create(ws, input=ASK, store=False, prompt_cache_options={"prewarm": True})
        assert [e["type"] for e in _until_end(ws)] == ["response.created", "response.completed"]


def test_an_upgrade_behind_a_request_still_answered_is_refused_and_that_request_ends(server):
    import socket

    body = json.dumps({"model": MODEL, "input": "Count to 300.", "max_output_tokens": 600, "stream": True})
    post = (f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {server.api_key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}")  # fmt: skip
    upgrade = (f"GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {server.api_key}\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n")  # fmt: skip
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(post.encode())
        got = b""
        while b"output_text.delta" not in got:
            got += sock.recv(65536)
        sock.sendall(upgrade.encode())
        while chunk := sock.recv(65536):  # the server closes the connection
            got += chunk
    assert b"101 Switching Protocols" not in got


def test_the_gate_checks_the_key_and_the_origin_before_the_socket_opens(server):
    with pytest.raises(InvalidStatus) as no_key:
        connect(_url(server), open_timeout=30)
    assert no_key.value.response.status_code == 401
    assert "key" in json.loads(no_key.value.response.body)["error"]["message"].lower()
    with pytest.raises(InvalidStatus) as foreign:
        _socket(server, Origin="https://evil.example")
    assert foreign.value.response.status_code == 403
    with _socket(server, Origin=f"http://127.0.0.1:{server.port}") as ws:  # a page served from this machine
        ws.send("{}")
        assert json.loads(ws.recv(timeout=30))["type"] == "error"


def test_a_connection_that_closes_gives_up_its_generation_and_the_request_log_says_so(server):
    with httpx.stream("GET", f"{server.root}/api/log/stream", headers=server.headers, timeout=120) as log:
        lines = log.iter_lines()
        assert next(lines) == ": subscribed"
        with _socket(server) as ws:
            _create(ws, input="Count from 1 to 500, one number a line.", max_output_tokens=1500)
            while json.loads(ws.recv(timeout=300))["type"] != "response.output_text.delta":
                pass
        record = next(json.loads(line[6:]) for line in lines if line.startswith("data: "))
    assert record["path"] == "/v1/responses" and record["dialect"] == "openai-responses"
    assert record["status"] == "cancelled" and record["completion_tokens"] < 500, record
    assert record["request_id"].startswith("req_")


def test_the_agents_sdk_runs_a_tool_and_answers_over_the_socket(server):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    seen: list[int] = []
    add = adding_tool(agents, seen)

    async def run() -> str:
        async with agents.responses_websocket_session(api_key=server.api_key, base_url=server.base_url) as session:
            agent = agents.Agent(name="calculator", instructions="Use the add tool to add numbers, then say the result.",
                                 tools=[add], model=MODEL,
                                 model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=200))  # fmt: skip
            result = await session.run(agent, "What is 2 plus 3?", max_turns=4)
            return result.final_output

    said = asyncio.run(run())
    assert len(seen) == 1  # the call came over the socket, and its output went back over it to the answer
    assert isinstance(said, str) and said.strip()
