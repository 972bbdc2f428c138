"""What a grammar-constrained tool call costs per output token beside free text, in one run against one
`hearth serve` (llama.cpp backend): the same request (the same tools rendered into the same prompt) with
``tool_choice: "required"`` (decoding constrained by the GBNF built from the tools' schemas) and with
``tool_choice: "auto"`` answered as free text, on a 3-tool and on a 20-tool schema.

Each request is non-streamed and greedy, and each timed one follows the same request untimed, so the
engine has its whole prompt cached and the request's time is its decode: ms per output token = wall time
/ completion tokens. The free-text side
decodes as many tokens as the call took (``max_tokens`` with ``ignore_eos``), so both decode the same
length. Rounds alternate the order so a change in the machine's load falls on both sides.

With ``--llama-server PATH`` (llama.cpp's own ``llama-server`` binary, built for measurement only; see
benchmarks/peers.md) the same requests also go to it, started with ``--jinja`` on the same GGUF, threads
and context, and measured the same way, for comparison.

Goal (issue 17): the constrained call within 10% of free text per output token (ratio <= 1.10).

    .venv/bin/python benchmarks/tool_call_overhead.py [--model PATH] [--rounds 5] [--llama-server PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

USER = "Plan my day: check the weather in Lisbon for 3 days and book a table for 2 at 19:30."


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def tools(n: int) -> list[dict]:
    """``n`` tools: three realistic ones, then more of varied shapes (20 is the larger schema). Arrays are
    bounded, as real tools' usually are: the starter model, given an unbounded one, fills it until max_tokens."""
    base = [
        _tool("get_weather", "Weather forecast for a city.",
              {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 10},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city", "days"]),
        _tool("book_table", "Book a restaurant table.",
              {"restaurant": {"type": "string"}, "people": {"type": "integer"}, "time": {"type": "string"}},
              ["restaurant", "people", "time"]),
        _tool("send_message", "Send a text message.",
              {"to": {"type": "string"}, "body": {"type": "string"}, "urgent": {"type": "boolean"}}, ["to", "body"]),
    ]  # fmt: skip
    kinds = [{"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
             {"type": "array", "items": {"type": "string"}, "maxItems": 4}]  # fmt: skip
    extra = [
        _tool(f"tool_{i}", f"Helper number {i}.",
              {f"arg_{j}": kinds[(i + j) % len(kinds)] for j in range(1 + i % 4)}, [f"arg_{0}"])
        for i in range(max(0, n - len(base)))
    ]  # fmt: skip
    return (base + extra)[:n]


def timed(client, model: str, tool_list: list[dict], choice: str, max_tokens: int, ignore_eos: bool, schema=None):
    """(ms per output token, completion tokens, whether the answer is a call). ``schema``: instead of a
    forced call, JSON output valid for it (``response_format``), for a server that cannot force one."""
    kw: dict = {"tools": tool_list, "tool_choice": choice}
    if schema is not None:
        kw = {"response_format": {"type": "json_schema", "json_schema": {"name": "call", "schema": schema}}}
    t0 = time.perf_counter()
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": USER}], temperature=0.0, max_tokens=max_tokens,
        extra_body={"ignore_eos": ignore_eos}, **kw,
    )  # fmt: skip
    dt = time.perf_counter() - t0
    n = r.usage.completion_tokens
    return dt * 1000 / max(1, n), n, bool(r.choices[0].message.tool_calls)


def measure(client, model: str, tool_list: list[dict], rounds: int, label: str, *, peer: bool = False) -> float:
    """The median constrained/free ms-per-token ratio for one schema on one server.

    Each timed request follows the same request untimed, so its prompt is cached whole and its time is
    its decode. A peer that cannot force a call (its answer is not one) is measured on the same schema
    through ``response_format`` instead, and said so.
    """
    schema = None
    _, call_tokens, is_call = timed(client, model, tool_list, "required", 512, False)
    if not is_call:
        if not peer:
            raise RuntimeError(f"{label}: the forced answer was not a tool call")
        from engine.tools.constraint import call_schema
        from engine.tools.spec import parse_tools

        schema = call_schema(parse_tools(tool_list))
        print(f"  {label}: tool_choice required gave no tool call; its grammar is measured with response_format")
        _, call_tokens, _ = timed(client, model, tool_list, "required", 512, False, schema)
    sides = {
        "constrained": lambda: timed(client, model, tool_list, "required", 512, False, schema),
        "free text": lambda: timed(client, model, tool_list, "auto", call_tokens, True),
    }
    ms: dict[str, list[float]] = {s: [] for s in sides}
    for i in range(rounds):
        order = list(sides) if i % 2 == 0 else list(sides)[::-1]
        for side in order:
            sides[side]()  # its prompt into the cache
            per_token, n, _ = sides[side]()
            ms[side].append(per_token)
            print(f"  {label} round {i + 1} {side:>11}: {per_token:7.2f} ms/token, {n} tokens")
    a, b = statistics.median(ms["constrained"]), statistics.median(ms["free text"])
    print(f"{label}: constrained {a:.2f} ms/token, free text {b:.2f} ms/token, ratio {a / b:.3f}")
    return a / b


def main(argv: list[str] | None = None) -> int:
    from engine.starter import starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=starter_model_path(), help="GGUF file (default: the starter model)")
    ap.add_argument("--threads", type=int, default=None, help="decode threads (default: Hearth's default)")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--llama-server", type=Path, metavar="PATH", help="llama.cpp's llama-server binary, measured beside")
    args = ap.parse_args(argv)

    import openai

    from engine.backends.llamacpp.backend import default_threads
    from engine.worker.supervisor import WorkerSupervisor

    threads = args.threads or default_threads()
    server = WorkerSupervisor(
        port=0,
        model=str(args.model),
        extra_args=["--backend", "llamacpp", "--parallel", "1", "--ctx", str(args.ctx), "--threads", str(threads)],
    )
    server.start()
    ratios: dict[str, float] = {}
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=600)
        print(f"model {args.model.name}, {threads} threads, ctx {args.ctx}, {args.rounds} rounds")
        for n in (3, 20):
            ratios[f"hearth {n} tools"] = measure(client, str(args.model), tools(n), args.rounds, f"hearth {n} tools")
    finally:
        server.stop()
    if args.llama_server:
        from engine.bench.peers import LlamaServer

        with LlamaServer(args.llama_server, args.model, n_ctx=args.ctx, parallel=1, n_threads=threads) as running:
            peer = openai.OpenAI(base_url=running.url, api_key="none", max_retries=0, timeout=600)
            for n in (3, 20):
                label = f"llama-server {n} tools"
                ratios[label] = measure(peer, str(args.model), tools(n), args.rounds, label, peer=True)
    print()
    for label, ratio in ratios.items():
        verdict = "within" if ratio <= 1.10 else "OVER"
        print(f"{label:>24}: constrained/free per output token {ratio:.3f} ({verdict} the 1.10 goal)")
    return 0 if all(r <= 1.10 for k, r in ratios.items() if k.startswith("hearth")) else 1


if __name__ == "__main__":
    sys.exit(main())
