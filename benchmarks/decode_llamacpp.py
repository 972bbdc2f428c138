"""Single-stream decode speed: Hearth's llama.cpp backend against raw llama-cpp-python, in one run.

Both sides load the same GGUF with the same context length and thread count, get the same prompt,
decode greedily and produce exactly --max-tokens tokens (Hearth: ignore_eos; raw: a logits processor
that bans the end-of-generation tokens, which costs it a few microseconds a token). Runs alternate
(Hearth, raw, raw, Hearth, ...) so a change in the machine's load falls on both, and each side runs
in a process of its own (see sides.py: two llama.cpp contexts computing from two threads of one process
slow each other). Decode speed is (tokens - 1) / (time of last token - time of first token); the first
token's time is reported apart.

Goal (issue 9): Hearth >= 1.1x raw llama-cpp-python's high-level API.

    .venv/bin/python benchmarks/decode_llamacpp.py [--model PATH] [--threads N] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

PROMPT = (
    "The history of the river town began long before the first stone bridge was built. Farmers came down "
    "from the hills each spring to trade wool and grain, and the market by the water grew year by year."
)


def hearth_run(backend, model_name: str, max_tokens: int) -> tuple[float, float, int]:
    """One generation on Hearth's backend: (time to first token, decode tokens/s, tokens)."""
    from engine.types import GenerationRequest, SamplingParams

    request = GenerationRequest(
        model=model_name,
        prompt=PROMPT,
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
    """One generation on llama_cpp.Llama's high-level streaming API: the same three figures."""
    import numpy as np

    counted = [0]

    def ban_eog(input_ids, scores):
        counted[0] += 1
        scores[eog] = -np.inf
        return scores

    t0 = time.perf_counter()
    first = last = None
    for _ in llm.create_completion(
        PROMPT, max_tokens=max_tokens, temperature=0.0, stream=True, logits_processor=[ban_eog], seed=0
    ):
        now = time.perf_counter()
        first = first or now
        last = now
    n = counted[0]
    return first - t0, (n - 1) / (last - first), n


class HearthSide:
    """Hearth's llama.cpp backend, one sequence slot."""

    def __init__(self, model: Path, ctx: int, threads: int) -> None:
        from engine.backends.base import LoadOptions, ModelSpec
        from engine.backends.llamacpp import LlamaCppBackend

        self.backend = LlamaCppBackend()
        self.backend.load(ModelSpec(name="bench", path=model), LoadOptions(n_ctx=ctx, n_seq_max=1, n_threads=threads))

    def run(self, max_tokens: int) -> tuple[float, float, int]:
        return hearth_run(self.backend, "bench", max_tokens)

    def close(self) -> None:
        self.backend.close()


class RawSide:
    """llama_cpp.Llama's high-level API."""

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


def main(argv: list[str] | None = None) -> int:
    from engine.starter import starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", type=Path, default=starter_model_path(), help="GGUF file (default: the starter model)"
    )
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: Hearth's default)")
    ap.add_argument("--ctx", type=int, default=1024, help="context length for both")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument(
        "--rounds", type=int, default=5, help="measured runs of each side (after one warm-up each)"
    )
    args = ap.parse_args(argv)

    from sides import Child

    from engine.backends.llamacpp.backend import default_threads

    threads = args.threads or default_threads()
    sides = {
        "hearth": Child("decode_llamacpp:HearthSide", model=args.model, ctx=args.ctx, threads=threads),
        "raw": Child("decode_llamacpp:RawSide", model=args.model, ctx=args.ctx, threads=threads),
    }
    print(
        f"model {args.model.name}, {threads} threads, ctx {args.ctx}, {args.max_tokens} tokens, {os.cpu_count()} CPUs"
    )
    try:
        for child in sides.values():  # warm-up: page in the weights, build the graphs
            child.run(args.max_tokens)
        results: dict[str, list[tuple[float, float, int]]] = {"hearth": [], "raw": []}
        for i in range(args.rounds):
            order = ("hearth", "raw") if i % 2 == 0 else ("raw", "hearth")
            for side in order:
                r = sides[side].run(args.max_tokens)
                results[side].append(r)
                print(
                    f"  round {i + 1} {side:>6}: first token {r[0] * 1000:6.1f} ms, {r[1]:6.1f} tokens/s, {r[2]} tokens"
                )
    finally:
        for child in sides.values():
            child.close()
    for side, rs in results.items():
        if any(n != args.max_tokens for _, _, n in rs):
            print(f"warning: {side} did not always produce {args.max_tokens} tokens", file=sys.stderr)
    h = statistics.median(r[1] for r in results["hearth"])
    w = statistics.median(r[1] for r in results["raw"])
    h_ttft = statistics.median(r[0] for r in results["hearth"])
    w_ttft = statistics.median(r[0] for r in results["raw"])
    print(f"hearth llama.cpp backend : {h:6.1f} tokens/s (median), first token {h_ttft * 1000:.1f} ms")
    print(f"raw llama-cpp-python     : {w:6.1f} tokens/s (median), first token {w_ttft * 1000:.1f} ms")
    print(f"ratio hearth / raw       : {h / w:.2f}x  (goal >= 1.10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
