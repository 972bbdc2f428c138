"""What the agent loop costs per tool round, on top of the model's turns and the tool's own time.

A real `hearth serve` (the starter model) and a real MCP server over stdio whose tool returns at once
(tests/engine/agent/mcp_server.py, ``lookup``). Each run makes ``--rounds`` tool rounds
(``tool_choice: required`` on every round, then the round limit's last turn without tools). The
model's share is the wall time of every ``/v1/chat/completions`` stream, timed around the client's
turn; everything else in the run is the loop's: approvals, JSON, the MCP round trip (stdio JSON-RPC
with the server's own near-zero work counted against the loop), the tool messages and the events.

``--loop-only`` leaves the model out: each round is what the loop does between two model turns —
approve, run the call through the MCP server, build the tool message and the next request body —
timed over ``--rounds`` rounds (default 50) in one process, with no worker.

Goal (issue 19): under 20 ms per tool round.

    .venv/bin/python benchmarks/agent_overhead.py [--runs 3] [--rounds 4]
    .venv/bin/python benchmarks/agent_overhead.py --loop-only [--rounds 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def one_run(base_url: str, key: str, rounds: int) -> tuple[float, float, int]:
    """(loop seconds, model seconds, tool rounds) of one agent run."""
    from engine.agent import AgentLoop, ApprovalPolicy, ChatClient, McpHub, McpServerConfig

    server = McpServerConfig(
        name="bench", command=sys.executable, args=(str(ROOT / "tests/engine/agent/mcp_server.py"), "stdio"),
        disabled_tools=frozenset({"wait", "slow_lookup", "crash"}),
    )  # fmt: skip
    hub = McpHub([server])
    await hub.start()
    model_time = 0.0

    class TimedClient(ChatClient):
        async def turn(self, body, **kw):
            nonlocal model_time
            t0 = time.perf_counter()
            try:
                return await super().turn(body, **kw)
            finally:
                model_time += time.perf_counter() - t0

    client = TimedClient(base_url, api_key=key)
    loop = AgentLoop(
        client, hub, ApprovalPolicy(allow_all=True), model="smollm2-135m-instruct",
        tool_choice="required", later_tool_choice="required", max_rounds=rounds,
        params={"temperature": 0, "max_tokens": 40},
    )  # fmt: skip
    try:
        t0 = time.perf_counter()
        result = await loop.run([{"role": "user", "content": "What does the word cat mean? Look it up."}])
        wall = time.perf_counter() - t0
    finally:
        await client.close()
        await hub.close()
    tool_rounds = len({c.round for c in result.calls if c.status == "done"})
    return wall, model_time, tool_rounds


async def loop_only(rounds: int) -> list[float]:
    """Seconds per round of the loop's own work between model turns (no model)."""
    import json

    from engine.agent import AgentLoop, ApprovalPolicy, ChatClient, McpHub, McpServerConfig, ToolCallRecord

    server = McpServerConfig(
        name="bench", command=sys.executable, args=(str(ROOT / "tests/engine/agent/mcp_server.py"), "stdio"),
        disabled_tools=frozenset({"wait", "slow_lookup", "crash"}),
    )  # fmt: skip
    hub = McpHub([server])
    await hub.start()
    loop = AgentLoop(ChatClient("http://127.0.0.1:9/v1"), hub, ApprovalPolicy(allow_all=True), model="m")
    messages: list[dict] = [{"role": "user", "content": "What does the word cat mean?"}]
    times: list[float] = []
    try:
        for i in range(rounds + 5):  # the first five warm up
            t0 = time.perf_counter()
            call = ToolCallRecord(id=f"call_{i}", name="lookup", arguments=json.dumps({"word": "cat"}))
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]})  # fmt: skip
            await loop._run_calls([call])
            messages.append({"role": "tool", "tool_call_id": call.id, "content": loop._for_model(call)})
            json.dumps(loop._body(messages[-3:], "auto"))  # the next request's body, serialized
            if i >= 5:
                times.append(time.perf_counter() - t0)
            assert call.status == "done", call.result
    finally:
        await hub.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=None, help="tool rounds per run (4; --loop-only: 50)")
    parser.add_argument("--loop-only", action="store_true", help="time the loop between model turns, no model")
    args = parser.parse_args()
    if args.loop_only:
        times = asyncio.run(loop_only(args.rounds or 50))
        median, p95 = statistics.median(times), sorted(times)[int(len(times) * 0.95) - 1]
        print(f"agent loop between model turns: median {median * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms per tool round "
              f"({len(times)} rounds; goal < 20 ms)")  # fmt: skip
        return 0 if median < 0.020 else 1
    args.rounds = args.rounds or 4
    from tests.engine.server.conftest import Server

    server = Server("--parallel", "1", "--ctx", "2048")
    try:
        per_round: list[float] = []
        for i in range(args.runs):
            wall, model, tool_rounds = asyncio.run(one_run(server.base_url, server.api_key, args.rounds))
            if not tool_rounds:
                print(f"run {i + 1}: no tool round completed", file=sys.stderr)
                continue
            cost = (wall - model) / tool_rounds
            per_round.append(cost)
            print(f"run {i + 1}: {wall:.2f} s in all, {model:.2f} s the model's, {tool_rounds} tool rounds, "
                  f"loop {cost * 1000:.1f} ms per round")  # fmt: skip
    finally:
        server.stop()
    if not per_round:
        return 1
    median = statistics.median(per_round)
    print(f"agent loop: {median * 1000:.1f} ms per tool round (median of {len(per_round)} runs; goal < 20 ms)")
    return 0 if median < 0.020 else 1


if __name__ == "__main__":
    sys.exit(main())
