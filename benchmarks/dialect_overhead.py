"""What the other dialects cost beside chat completions, in one run against one `hearth serve`:
single-stream decode through ``/v1/chat/completions`` (the openai client), ``/v1/messages`` (the
anthropic client), ``/v1/responses`` (the openai client's responses.stream) and ``/api/chat`` (the
ollama client), each streaming the same greedy chat on the same model.

Every side asks for --max-tokens tokens of the same prompt; greedy decoding makes them the same
tokens, so each side decodes the same number (the server's own count is reported and checked).
Rounds rotate the order so a change in the machine's load falls on every side. Reported per side:
the median decode speed (tokens after the first, over the time from the first to the last, as the
client sees them) and the time to the first token; and each dialect's decode speed over chat
completions'.

With ``--raw`` every side reads its stream with the same few lines of httpx instead of its SDK (JSON per
event, nothing accumulated), so what differs between the sides is only what the server does: the SDKs
parse and accumulate differently (the openai client's responses.stream rebuilds the whole response at
every event), and on a 2-core machine the client's work takes time from the decode.

Goal (issue 18): every dialect within 3% of chat completions (ratio >= 0.97).

    .venv/bin/python benchmarks/dialect_overhead.py [--model PATH] [--max-tokens 128] [--rounds 5] [--raw]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

SYSTEM = "You are a helpful assistant."
USER = "Tell the story of a river town, from its first market to its stone bridge."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]


class Clock:
    """First and last moments text arrived, and how many pieces."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None

    def tick(self) -> None:
        now = time.perf_counter()
        self.first = self.first or now
        self.last = now

    def result(self, tokens: int) -> tuple[float, float, int]:
        """(time to first token, decode tokens/s, tokens)."""
        if self.first is None or self.last is None or tokens < 2 or self.last <= self.first:
            raise RuntimeError("the answer was too short to time; raise --max-tokens")
        return self.first - self.t0, (tokens - 1) / (self.last - self.first), tokens


def chat_side(client, model: str, max_tokens: int) -> tuple[float, float, int]:
    clock, n = Clock(), 0
    stream = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=max_tokens, temperature=0.0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    for chunk in stream:
        if chunk.usage is not None:
            n = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            clock.tick()
    return clock.result(n)


def messages_side(client, model: str, max_tokens: int) -> tuple[float, float, int]:
    clock = Clock()
    with client.messages.stream(
        model=model, max_tokens=max_tokens, system=SYSTEM, messages=MESSAGES[1:], extra_body={"temperature": 0.0}
    ) as stream:
        for _ in stream.text_stream:
            clock.tick()
        n = stream.get_final_message().usage.output_tokens
    return clock.result(n)


def responses_side(client, model: str, max_tokens: int) -> tuple[float, float, int]:
    clock, n = Clock(), 0
    with client.responses.stream(
        model=model, instructions=SYSTEM, input=USER, max_output_tokens=max_tokens, temperature=0.0
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                clock.tick()
            elif event.type in ("response.completed", "response.incomplete"):
                n = event.response.usage.output_tokens
    return clock.result(n)


def ollama_side(client, model: str, max_tokens: int) -> tuple[float, float, int]:
    clock, n = Clock(), 0
    for part in client.chat(model=model, messages=MESSAGES, stream=True,
                            options={"temperature": 0.0, "num_predict": max_tokens}):  # fmt: skip
        if part.message.content:
            clock.tick()
        if part.done:
            n = part.eval_count
    return clock.result(n)


def raw_side(http, path: str, body: dict, text_of, tokens_of) -> tuple[float, float, int]:
    """One stream read with httpx alone: each event's JSON parsed, its text (``text_of``) timed and the
    token count taken from the event that has it (``tokens_of``)."""
    clock, n = Clock(), 0
    with http.stream("POST", path, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            data = line[6:] if line.startswith("data: ") else line if line.startswith("{") else None
            if not data or data == "[DONE]":
                continue
            event = json.loads(data)
            if text_of(event):
                clock.tick()
            n = tokens_of(event) or n
    return clock.result(n)


def raw_sides(http, model: str, max_tokens: int) -> dict:
    def chat_text(e):
        return e.get("choices") and e["choices"][0]["delta"].get("content")

    def messages_text(e):
        return e.get("type") == "content_block_delta" and e["delta"].get("text")

    def responses_text(e):
        return e.get("type") == "response.output_text.delta" and e.get("delta")

    def responses_tokens(e):
        return e.get("type") in ("response.completed", "response.incomplete") and e["response"]["usage"]["output_tokens"]

    common = {"model": model, "stream": True, "temperature": 0.0}
    return {
        "/v1/chat/completions": lambda: raw_side(
            http, "/v1/chat/completions",
            {**common, "messages": MESSAGES, "max_tokens": max_tokens, "stream_options": {"include_usage": True}},
            chat_text, lambda e: (e.get("usage") or {}).get("completion_tokens"),
        ),
        "/v1/messages": lambda: raw_side(
            http, "/v1/messages", {**common, "system": SYSTEM, "messages": MESSAGES[1:], "max_tokens": max_tokens},
            messages_text, lambda e: e.get("type") == "message_delta" and e["usage"]["output_tokens"],
        ),
        "/v1/responses": lambda: raw_side(
            http, "/v1/responses", {**common, "instructions": SYSTEM, "input": USER, "max_output_tokens": max_tokens},
            responses_text, responses_tokens,
        ),
        "/api/chat": lambda: raw_side(
            http, "/api/chat",
            {"model": model, "messages": MESSAGES, "stream": True, "options": {"temperature": 0.0, "num_predict": max_tokens}},
            lambda e: e.get("message", {}).get("content"), lambda e: e.get("done") and e.get("eval_count"),
        ),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from engine.starter import starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=starter_model_path(), help="GGUF file (default: the starter model)")
    ap.add_argument("--threads", type=int, default=None, help="decode threads (default: Hearth's default)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--raw", action="store_true", help="read every stream with httpx alone, not its SDK")
    args = ap.parse_args(argv)

    import anthropic
    import httpx
    import ollama
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
    try:
        root = server.base_url.removesuffix("/v1")
        key = server.api_key
        oa = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=300)
        an = anthropic.Anthropic(base_url=root, api_key=key, max_retries=0, timeout=300)
        ol = ollama.Client(host=root, headers={"Authorization": f"Bearer {key}"}, timeout=300)
        model = str(args.model)
        sides = {
            "/v1/chat/completions": lambda: chat_side(oa, model, args.max_tokens),
            "/v1/messages": lambda: messages_side(an, model, args.max_tokens),
            "/v1/responses": lambda: responses_side(oa, model, args.max_tokens),
            "/api/chat": lambda: ollama_side(ol, model, args.max_tokens),
        }
        if args.raw:
            http = httpx.Client(base_url=root, headers={"Authorization": f"Bearer {key}"}, timeout=300)
            sides = raw_sides(http, model, args.max_tokens)
        print(f"{'httpx alone' if args.raw else 'official clients'}: ", end="")
        print(f"model {args.model.name}, {threads} threads, ctx {args.ctx}, {args.max_tokens} tokens, {args.rounds} rounds")
        for run in sides.values():  # warm-up (and the prompt's prefix cached for every side alike)
            run()
        results: dict[str, list[tuple[float, float, int]]] = {side: [] for side in sides}
        order = list(sides)
        for i in range(args.rounds):
            k = i % len(order)
            for side in order[k:] + order[:k]:
                r = sides[side]()
                results[side].append(r)
                print(f"  round {i + 1} {side:>21}: first token {r[0] * 1000:7.1f} ms, {r[1]:6.1f} tokens/s, {r[2]} tokens")
    finally:
        server.stop()
    speed = {side: statistics.median(r[1] for r in rs) for side, rs in results.items()}
    ttft = {side: statistics.median(r[0] for r in rs) for side, rs in results.items()}
    counts = {side: {r[2] for r in rs} for side, rs in results.items()}
    base = "/v1/chat/completions"
    for side in results:
        print(f"{side:>21}: {speed[side]:6.1f} tokens/s, first token {ttft[side] * 1000:7.1f} ms (medians), tokens {sorted(counts[side])}")
    for side in order[1:]:
        print(f"{side:>21} / chat completions: {speed[side] / speed[base]:.3f}  (goal >= 0.97)")
    if len(set().union(*counts.values())) > 1:
        print("note: the sides decoded different numbers of tokens; their speeds are still per token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
