"""What the HTTP API costs, in one run, three sides on the same GGUF, context, threads and chat:

- raw llama-cpp-python: ``llama_cpp.Llama.create_chat_completion`` streaming in-process;
- Hearth in-process: the llama.cpp backend called directly;
- Hearth API: the same backend behind `hearth serve`, reached with the official openai client.

Greedy, exactly --max-tokens tokens each (Hearth: ignore_eos; raw: a logits processor banning the
end-of-generation tokens). Runs rotate so a change in the machine's load falls on every side, and
each side runs in a process of its own (sides.py: two llama.cpp contexts computing from two threads
of one process slow each other; the API side's is the server's).
Reported: decode speed of the API over raw llama-cpp-python and the time the API adds to the first
token over raw llama-cpp-python (the goal), and the same two figures against Hearth in-process (what
HTTP, SSE and the client cost on their own).

Goal (issue 3): API / raw llama-cpp-python >= 0.95 and added time to first token < 20 ms.

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


def raw_run(llm, eog: list[int], max_tokens: int) -> tuple[float, float, int]:
    """The same figures from llama_cpp.Llama's own streaming chat completion."""
    import numpy as np

    counted = [0]

    def ban_eog(input_ids, scores):
        counted[0] += 1
        scores[eog] = -np.inf
        return scores

    t0 = time.perf_counter()
    first = last = None
    for chunk in llm.create_chat_completion(
        messages=MESSAGES, max_tokens=max_tokens, temperature=0.0, stream=True, logits_processor=[ban_eog]
    ):
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            now = time.perf_counter()
            first = first or now
            last = now
    n = counted[0]
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


class RawSide:
    """llama_cpp.Llama's streaming chat completion."""

    def __init__(self, model: Path, ctx: int, threads: int) -> None:
        import llama_cpp

        from engine.bench.peers import eog_token_ids

        self.llm = llama_cpp.Llama(
            model_path=str(model), n_ctx=ctx, n_threads=threads, n_threads_batch=threads, verbose=False
        )
        self.eog = eog_token_ids(model)

    def run(self, max_tokens: int) -> tuple[float, float, int]:
        return raw_run(self.llm, self.eog, max_tokens)

    def close(self) -> None:
        self.llm.close()


class InProcessSide:
    """Hearth's llama.cpp backend called directly."""

    def __init__(self, model: Path, ctx: int, threads: int) -> None:
        from engine.backends.base import LoadOptions, ModelSpec
        from engine.backends.llamacpp import LlamaCppBackend

        self.backend = LlamaCppBackend()
        self.backend.load(ModelSpec(name="bench", path=model), LoadOptions(n_ctx=ctx, n_seq_max=1, n_threads=threads))

    def run(self, max_tokens: int) -> tuple[float, float, int]:
        return inprocess_run(self.backend, max_tokens)

    def close(self) -> None:
        self.backend.close()


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
    from sides import Child

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
    children = []
    try:
        for target in ("api_overhead:RawSide", "api_overhead:InProcessSide"):
            children.append(Child(target, model=args.model, ctx=args.ctx, threads=threads))
        raw, inproc = children
        client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=300)
        model = str(args.model)
        runs = {
            "raw": lambda: raw.run(args.max_tokens),
            "in-process": lambda: inproc.run(args.max_tokens),
            "api": lambda: api_run(client, model, args.max_tokens),
        }
        print(f"model {args.model.name}, {threads} threads, ctx {args.ctx}, {args.max_tokens} tokens")
        for run in runs.values():  # warm-up
            run()
        results: dict[str, list[tuple[float, float, int]]] = {side: [] for side in runs}
        order = list(runs)
        for i in range(args.rounds):
            for side in order[i % 3 :] + order[: i % 3]:
                r = runs[side]()
                results[side].append(r)
                print(
                    f"  round {i + 1} {side:>10}: first token {r[0] * 1000:6.1f} ms, {r[1]:6.1f} tokens/s, {r[2]} tokens"
                )
    finally:
        for child in children:
            child.close()
        server.stop()
    speed = {side: statistics.median(r[1] for r in rs) for side, rs in results.items()}
    ttft = {side: statistics.median(r[0] for r in rs) for side, rs in results.items()}
    for side in results:
        print(f"{side:<11}: {speed[side]:6.1f} tokens/s, first token {ttft[side] * 1000:6.1f} ms (medians)")
    print(f"API / raw llama-cpp-python : {speed['api'] / speed['raw']:.3f}  (goal >= 0.95)")
    print(f"first token, API - raw     : {(ttft['api'] - ttft['raw']) * 1000:+.1f} ms  (goal < 20 ms)")
    print(f"API / Hearth in-process    : {speed['api'] / speed['in-process']:.3f}")
    print(f"first token, API - in-proc : {(ttft['api'] - ttft['in-process']) * 1000:+.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
