"""The agent loop against a real `hearth serve` (starter model, tool_choice required) and a real MCP
server: a call that runs and an answer, approvals (once, always, deny), Stop mid-call, a server
that dies mid-loop, the round limit."""

from __future__ import annotations

import asyncio

import pytest

from engine.agent import AgentLoop, ApprovalPolicy, ChatClient, Decision, McpHub
from engine.agent.runtime import AgentRuntime
from tests.engine.agent.conftest import stdio_config
from tests.engine.server.conftest import MODEL

ASK = [{"role": "user", "content": "What does the word cat mean? Look it up."}]
PARAMS = {"temperature": 0, "max_tokens": 48}
ALL = {"lookup", "wait", "slow_lookup", "crash"}


def only(config, *keep: str):
    for name in ALL - set(keep):
        config = config.with_tool(name, False)
    return config


@pytest.fixture
def runtime():
    rt = AgentRuntime()
    yield rt
    rt.close()


def start_hub(runtime, *configs) -> McpHub:
    hub = McpHub(list(configs))
    runtime.call(hub.start(), timeout=120)
    return hub


def make_loop(api, hub, approval, events=None, **kw) -> AgentLoop:
    client = ChatClient(api.base_url, api_key=api.api_key)
    return AgentLoop(client, hub, approval, model=MODEL, tool_choice="required", params=PARAMS,
                     on_event=(events.append if events is not None else None), **kw)  # fmt: skip


def test_call_runs_and_the_model_answers_with_approvals(api, runtime, call_log):
    hub = start_hub(runtime, only(stdio_config("rec", call_log.path), "lookup"))
    asked: list[str] = []
    answers = iter([Decision.ALWAYS])

    async def ask(call, tool):
        asked.append(tool.key)
        return next(answers)

    saved: list[str] = []
    approval = ApprovalPolicy(ask, on_always=saved.append)
    try:
        events: list = []
        result = runtime.call(make_loop(api, hub, approval, events, max_rounds=1).run(list(ASK)), timeout=900)
        assert result.error is None and not result.stopped
        first = result.calls[0]
        assert first.name == "lookup" and first.server == "rec" and first.status == "done"
        assert "small domestic animal" in first.result and first.duration is not None
        assert asked == ["rec/lookup"] and saved == ["rec/lookup"]  # asked once, then always allowed
        assert len(call_log.calls()) == len(result.calls)  # every call reached the server
        roles = [m["role"] for m in result.messages]
        assert roles[:3] == ["user", "assistant", "tool"] and roles[-1] == "assistant"
        assert result.messages[1]["tool_calls"][0]["function"]["name"] == "lookup"
        assert result.messages[2]["tool_call_id"] == result.messages[1]["tool_calls"][0]["id"]
        kinds = [e.kind for e in events]
        assert "call_started" in kinds and "call_finished" in kinds
        if result.round_limit:  # the model kept calling: said, and answered without tools
            assert "round_limit" in kinds
        assert isinstance(result.answer, str) and result.messages[-1]["content"] == result.answer
    finally:
        runtime.call(hub.close())


def test_denied_call_goes_back_to_the_model_as_a_denial(api, runtime, call_log):
    hub = start_hub(runtime, only(stdio_config("rec", call_log.path), "lookup"))

    async def deny(call, tool):
        return Decision.DENY

    try:
        result = runtime.call(make_loop(api, hub, ApprovalPolicy(deny), max_rounds=1).run(list(ASK)), timeout=900)
        assert result.calls and all(c.status == "denied" for c in result.calls)
        assert call_log.calls() == []  # nothing reached the server
        tool_msgs = [m for m in result.messages if m["role"] == "tool"]
        assert "denied" in tool_msgs[0]["content"]
        assert result.round_limit  # one round allowed; the limit is said and the model answers without tools
        assert result.messages[-1]["role"] == "assistant"
    finally:
        runtime.call(hub.close())


def test_stop_cancels_a_running_call_and_keeps_the_finished_steps(api, runtime, call_log):
    hub = start_hub(runtime, only(stdio_config("rec", call_log.path), "slow_lookup"))
    events: list = []
    try:
        loop = make_loop(api, hub, ApprovalPolicy(allow_all=True), events)
        run = runtime.start(loop.run(list(ASK)))

        async def running():
            while not any(e.kind == "call_started" and e.call.status == "running" for e in events):
                await asyncio.sleep(0.05)
            while not call_log.calls():  # the server has it
                await asyncio.sleep(0.05)

        runtime.call(running(), timeout=900)
        run.stop()
        result = run.result(timeout=60)
        assert result.stopped
        assert result.calls[0].status == "cancelled"
        assert [m["role"] for m in result.messages] == ["user", "assistant"]  # the call the model made is kept
        assert [c["tool"] for c in call_log.calls()] == ["slow_lookup"]  # started, never finished
    finally:
        runtime.call(hub.close())


def test_server_dying_mid_loop_is_said_and_the_chat_goes_on(api, runtime, call_log):
    hub = start_hub(runtime, only(stdio_config("rec", call_log.path), "crash"))
    events: list = []
    try:
        result = runtime.call(
            make_loop(api, hub, ApprovalPolicy(allow_all=True), events).run(list(ASK)), timeout=900
        )
        assert result.calls[0].status == "error" and "stopped" in result.calls[0].result
        failed = [e for e in events if e.kind == "server_failed"]
        assert failed and failed[0].server == "rec" and "crashing on purpose" in failed[0].text
        assert result.rounds == 2 and not result.round_limit  # the next turn had no tools and answered
        assert result.messages[-1]["role"] == "assistant" and result.error is None
    finally:
        runtime.call(hub.close())
