"""An agent's loop of short turns through the Responses API, over HTTP and over its WebSocket mode, in one run
against one `hearth serve`.

Each side runs the same chain of --turns turns: the first sends the instructions and a question, each later one a
short new user message and ``previous_response_id`` (a coding agent's loop sends a tool's output the same way), and
every answer is --max-tokens greedy tokens. Over HTTP each turn is a streamed ``POST /v1/responses`` with
``store: true`` (the openai SDK, its connection kept alive), as a client that continues by id must store; over the
WebSocket each is a ``response.create`` on one connection (the SDK's ``responses.connect()``) with ``store: false``,
continued from the connection's own copy. Rounds alternate which side goes first. Reported per side: the median
time of a turn (from the request to the response's last event) and of its first token, and HTTP's turn time over
the WebSocket's (above 1: the WebSocket is faster).

    .venv/bin/python benchmarks/responses_socket.py [--model PATH] [--turns 20] [--max-tokens 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

INSTRUCTIONS = "You are a coding agent. Answer each step in a few words."
FIRST = "Step 1: list the files of the project."
LAST_EVENTS = ("response.completed", "response.incomplete", "response.failed", "error")


def _timed(events, started: float) -> tuple[float, float, str]:
    """(turn seconds, first-token seconds, the last response's id) of one turn's events."""
    first = None
    for event in events:
        if event.type == "response.output_text.delta" and first is None:
            first = time.perf_counter() - started
        if event.type in LAST_EVENTS:
            if event.type in ("error", "response.failed"):
                raise RuntimeError(f"the turn failed: {event}")
            return time.perf_counter() - started, first if first is not None else float("nan"), event.response.id
    raise RuntimeError("the stream ended without its last event")


def http_chain(client, model: str, turns: int, max_tokens: int) -> list[tuple[float, float]]:
    out, previous = [], None
    for i in range(turns):
        started = time.perf_counter()
        words = FIRST if i == 0 else f"Step {i + 1}: go on."
        stream = client.responses.create(model=model, instructions=INSTRUCTIONS, input=words, previous_response_id=previous,
                                         max_output_tokens=max_tokens, temperature=0, store=True, stream=True)  # fmt: skip
        seconds, first, previous = _timed(stream, started)
        out.append((seconds, first))
    return out


def socket_chain(client, model: str, turns: int, max_tokens: int) -> list[tuple[float, float]]:
    out, previous = [], None
    with client.responses.connect() as conn:
        for i in range(turns):
            started = time.perf_counter()
            words = FIRST if i == 0 else f"Step {i + 1}: go on."
            conn.response.create(model=model, instructions=INSTRUCTIONS, input=words, previous_response_id=previous,
                                 max_output_tokens=max_tokens, temperature=0, store=False)  # fmt: skip
            seconds, first, previous = _timed(conn, started)
            out.append((seconds, first))
    return out


def main(argv: list[str] | None = None) -> int:
    from engine.starter import starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=starter_model_path(), help="GGUF file (default: the starter model)")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    import openai

    from engine.worker.supervisor import WorkerSupervisor

    server = WorkerSupervisor(port=0, model=str(args.model), extra_args=["--parallel", "2", "--ctx", str(args.ctx)])
    server.start()
    sides = {"http": http_chain, "websocket": socket_chain}
    results: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=300)
        model = client.models.list().data[0].id  # the name the worker serves the file by
        print(f"model {args.model.name}, {args.turns} turns a chain, {args.max_tokens} tokens a turn, {args.rounds} rounds")
        for run in sides.values():  # warm-up: the model loaded, the instructions' prefix cached for both
            run(client, model, 2, args.max_tokens)
        for i in range(args.rounds):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for side in order:
                turns = sides[side](client, model, args.turns, args.max_tokens)
                results[side] += turns
                took = statistics.median(t for t, _ in turns)
                print(f"  round {i + 1} {side:>9}: turn {took * 1000:7.1f} ms (median of {len(turns)})")
    finally:
        server.stop()
    turn = {side: statistics.median(t for t, _ in rs) for side, rs in results.items()}
    first = {side: statistics.median(f for _, f in rs) for side, rs in results.items()}
    for side in sides:
        print(f"{side:>9}: turn {turn[side] * 1000:7.1f} ms, first token {first[side] * 1000:7.1f} ms (medians)")
    print(f"turn time, HTTP / WebSocket: {turn['http'] / turn['websocket']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
