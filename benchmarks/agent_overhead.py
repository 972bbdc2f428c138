"""What the agent loop costs per tool round, on top of the model's turns and the tool's own time.

A real `hearth serve` (the starter model) and a real MCP server over stdio whose tool returns at once
(tests/engine/agent/mcp_server.py, ``lookup``). Each run makes ``--rounds`` tool rounds
(``tool_choice: required`` on every round, then the round limit's last turn without tools). The
model's share is the wall time of every ``/v1/chat/completions`` stream, timed around the client's
turn; everything else in the run is the loop's: approvals, JSON, the MCP round trip (stdio JSON-RPC
with the server's own near-zero work counted against the loop), the tool messages and the events.

Goal (issue 19): under 20 ms per tool round.

    .venv/bin/python benchmarks/agent_overhead.py [--runs 3] [--rounds 4]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4, help="tool rounds per run")
    args = parser.parse_args()
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
