"""MCP sessions on the official SDK against a real server (stdio and streamable HTTP): tools listed,
calls recorded by the server, concurrent calls, a server that cannot start and one that dies."""

from __future__ import annotations

import asyncio
import json

from engine.agent import McpHub, McpServerConfig
from engine.agent.approval import ApprovalPolicy
from engine.agent.chat_client import ChatClient
from engine.agent.loop import AgentLoop, ToolCallRecord
from tests.engine.agent.conftest import stdio_config


def test_stdio_server_lists_tools_and_runs_calls_at_once(call_log):
    async def main():
        hub = McpHub([stdio_config("rec", call_log.path).with_tool("crash", False)])
        await hub.start()
        try:
            names = {t.name for t in hub.tools()}
            assert names == {"lookup", "wait", "slow_lookup"}  # crash is switched off
            out = await hub.call("lookup", {"word": "cat"})
            assert not out.is_error and "small domestic animal" in out.text
            # two calls in one turn run concurrently: the second starts before the first ends
            loop = AgentLoop(ChatClient("http://127.0.0.1:9/v1"), hub, ApprovalPolicy(allow_all=True), model="m")
            calls = [ToolCallRecord(id=f"call_{i}", name="wait", arguments=json.dumps({"seconds": 1.5})) for i in (1, 2)]
            await loop._run_calls(calls)
            assert [c.status for c in calls] == ["done", "done"]
            assert calls[0].result == "waited 1.5 s" and calls[0].duration >= 1.5
        finally:
            await hub.close()

    asyncio.run(main())
    log = [c["tool"] for c in call_log.calls()]
    assert log[0] == "lookup"
    assert log[1:3] == ["wait", "wait"], log  # both began before either ended


def test_http_server_through_streamable_http(http_server):
    url, log = http_server

    async def main():
        hub = McpHub([McpServerConfig(name="web", url=url, headers=(("X-Test", "yes"),))])
        await hub.start()
        try:
            assert hub.failures() == []
            assert "lookup" in {t.name for t in hub.tools()}
            out = await hub.call("lookup", {"word": "dog"})
            assert "'dog' means" in out.text
        finally:
            await hub.close()

    asyncio.run(main())
    assert {"tool": "lookup", "args": {"word": "dog"}} in [{k: c[k] for k in ("tool", "args")} for c in log.calls()]


def test_failed_and_dying_servers_show_stderr_and_the_others_go_on(call_log, tmp_path):
    async def main():
        hub = McpHub(
            [
                stdio_config("good", call_log.path),
                stdio_config("broken", tmp_path / "b.jsonl", HEARTH_TEST_MCP_FAIL="1"),
                McpServerConfig(name="missing", command="no-such-mcp-server-program"),
            ]
        )
        await hub.start()
        try:
            failed = {f.server: f for f in hub.failures()}
            assert set(failed) == {"broken", "missing"}
            assert "the database is missing" in failed["broken"].stderr
            assert "not found" in failed["missing"].reason
            assert {t.server for t in hub.tools()} == {"good"}
            loop = AgentLoop(ChatClient("http://127.0.0.1:9/v1"), hub, ApprovalPolicy(allow_all=True), model="m")
            crash = ToolCallRecord(id="call_c", name="crash", arguments="{}")
            await loop._run_calls([crash])
            assert crash.status == "error" and "stopped" in crash.result
            dead = {f.server: f for f in hub.failures()}
            assert "crashing on purpose" in dead["good"].stderr
            assert hub.tools() == []  # its tools are no longer offered
        finally:
            await hub.close()

    asyncio.run(main())


def test_a_server_that_exits_while_idle_is_noticed_when_it_exits(call_log, tmp_path):
    trigger = tmp_path / "exit-now"

    async def main():
        told = []
        noticed = asyncio.Event()

        def on_failure(failure):
            told.append(failure)
            noticed.set()

        hub = McpHub([stdio_config("idle", call_log.path, HEARTH_TEST_MCP_EXIT_FILE=str(trigger))], on_failure=on_failure)
        await hub.start()
        try:
            assert hub.failures() == [] and {t.server for t in hub.tools()} == {"idle"}
            trigger.touch()  # no call is made: the server just goes
            await asyncio.wait_for(noticed.wait(), 30)
            assert [f.server for f in told] == ["idle"] and told[0].reason == "it exited"
            assert "exiting on its own" in told[0].stderr
            assert hub.tools() == [] and hub.tool("lookup") is None  # the next turn goes on without it
            assert [f.server for f in hub.new_failures()] == ["idle"]
        finally:
            await hub.close()
        assert len(told) == 1  # closing the hub is no second failure

    asyncio.run(main())
