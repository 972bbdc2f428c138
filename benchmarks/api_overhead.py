"""What the HTTP API costs: the llama.cpp backend in-process against the same backend behind
`hearth serve`, reached with the official openai client (streaming chat), in one run.

Both sides load the same GGUF with the same context, threads and one sequence slot, and get the same
chat messages, greedy, exactly --max-tokens tokens (ignore_eos). Runs alternate. Reported: the ratio
of decode speeds (API / in-process) and the time the API adds to the first token.

Goal (issue 3): ratio >= 0.95 and added time to first token < 20 ms.

    .venv/bin/python benchmarks/api_overhead.py [--model PATH] [--threads N] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tell the story of a river town, from its first market to its stone bridge."},
]


def inprocess_run(backend, max_tokens: int) -> tuple[float, float, int]:
    """(time to first token, decode tokens/s, tokens) on the backend itself."""
    from engine.types import GenerationRequest, SamplingParams, as_messages

    request = GenerationRequest(
        model="bench",
        messages=as_messages(MESSAGES),
        params=SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
    )
    t0 = time.perf_counter()
    first = last = None
    n = 0
    for chunk in backend.stream(request):
        if chunk.token_ids:
            now = time.perf_counter()
            first = first or now
            last = now
            n += len(chunk.token_ids)
    return first - t0, (n - 1) / (last - first), n


def api_run(client, model: str, max_tokens: int) -> tuple[float, float, int]:
    """The same figures through `hearth serve` and the openai client; tokens from the server's usage."""
    t0 = time.perf_counter()
    first = last = None
    n = 0
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            n = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            first = first or now
            last = now
    return first - t0, (n - 1) / (last - first), n


def main(argv: list[str] | None = None) -> int:
    from engine.starter import starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", type=Path, default=starter_model_path(), help="GGUF file (default: the starter model)"
    )
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: Hearth's default)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)

    import openai

    from engine.backends.base import LoadOptions, ModelSpec
    from engine.backends.llamacpp import LlamaCppBackend
    from engine.backends.llamacpp.backend import default_threads
    from engine.worker.supervisor import WorkerSupervisor

    threads = args.threads or default_threads()
    server = WorkerSupervisor(
        port=0,
        model=str(args.model),
        extra_args=[
            "--backend",
            "llamacpp",
            "--parallel",
            "1",
            "--ctx",
            str(args.ctx),
            "--threads",
            str(threads),
        ],
    )
    server.start()
    backend = LlamaCppBackend()
    try:
        backend.load(
            ModelSpec(name="bench", path=args.model),
            LoadOptions(n_ctx=args.ctx, n_seq_max=1, n_threads=threads),
        )
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=300)
        model = str(args.model)
        print(f"model {args.model.name}, {threads} threads, ctx {args.ctx}, {args.max_tokens} tokens")
        inprocess_run(backend, args.max_tokens)  # warm-up both
        api_run(client, model, args.max_tokens)
        results: dict[str, list[tuple[float, float, int]]] = {"in-process": [], "api": []}
        for i in range(args.rounds):
            for side in ("in-process", "api") if i % 2 == 0 else ("api", "in-process"):
                r = (
                    api_run(client, model, args.max_tokens)
                    if side == "api"
                    else inprocess_run(backend, args.max_tokens)
                )
                results[side].append(r)
                print(
                    f"  round {i + 1} {side:>10}: first token {r[0] * 1000:6.1f} ms, {r[1]:6.1f} tokens/s, {r[2]} tokens"
                )
    finally:
        backend.close()
        server.stop()
    inp = statistics.median(r[1] for r in results["in-process"])
    api = statistics.median(r[1] for r in results["api"])
    added = statistics.median(r[0] for r in results["api"]) - statistics.median(
        r[0] for r in results["in-process"]
    )
    print(f"in-process : {inp:6.1f} tokens/s (median)")
    print(f"API        : {api:6.1f} tokens/s (median)")
    print(f"ratio API / in-process : {api / inp:.3f}  (goal >= 0.95)")
    print(f"added time to first token : {added * 1000:.1f} ms  (goal < 20 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
