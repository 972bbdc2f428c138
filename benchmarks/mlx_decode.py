"""Single-stream decode speed: Hearth's MLX backend against its llama.cpp backend on the same GGUF, in one run.

Both load the same file (default: the starter model, Q4_1) with the same context and one sequence,
get the same prompt, decode greedily and produce exactly --max-tokens tokens (ignore_eos). Runs
alternate (mlx, llama.cpp, llama.cpp, mlx, ...) so a change in the machine's load falls on both.
Decode speed is (tokens - 1) / (time of last token - time of first token); the time to the first
token (prompt processing) is reported apart. Every run sends a different prompt (a round number
in front) so neither side answers from its prefix cache. Medians and bests are both printed: on a
shared machine llama.cpp's spinning threads can lose whole rounds to other processes (--threads 1
steadies it), while MLX's CPU build computes mostly on one thread.

On Linux MLX runs on its CPU build (reference BLAS, no Metal): expect it well behind llama.cpp
there; on Apple Silicon it runs on the GPU.

    .venv/bin/python benchmarks/mlx_decode.py [--model PATH] [--rounds 5] [--max-tokens 64]
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


def run(backend, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    """(time to first token, decode tokens/s, tokens) for one greedy generation."""
    from engine.types import GenerationRequest, SamplingParams

    request = GenerationRequest(
        model="bench",
        prompt=prompt,
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


def main(argv: list[str] | None = None) -> int:
    from engine.starter import starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", type=Path, default=starter_model_path(), help="GGUF file (default: the starter model)"
    )
    ap.add_argument("--ctx", type=int, default=1024, help="context length for both")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: Hearth's default)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument(
        "--rounds", type=int, default=5, help="measured runs of each side (after one warm-up each)"
    )
    args = ap.parse_args(argv)

    from engine.backends.base import LoadOptions, ModelSpec
    from engine.backends.llamacpp import LlamaCppBackend
    from engine.backends.mlx import MLXBackend

    spec = ModelSpec(name="bench", path=args.model)
    sides = {"mlx": MLXBackend(), "llama.cpp": LlamaCppBackend()}
    import mlx.core as mx

    print(
        f"model {args.model.name}, ctx {args.ctx}, {args.max_tokens} tokens, {os.cpu_count()} CPUs, MLX on {mx.default_device()}"
    )
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in sides}
    try:
        for backend in sides.values():
            backend.load(spec, LoadOptions(n_ctx=args.ctx, n_seq_max=1, n_threads=args.threads))
            run(backend, "Warm-up. " + PROMPT, args.max_tokens)  # page in the weights, build the graphs
        for i in range(args.rounds):
            order = ("mlx", "llama.cpp") if i % 2 == 0 else ("llama.cpp", "mlx")
            for name in order:
                r = run(sides[name], f"Round {i + 1}. {PROMPT}", args.max_tokens)
                results[name].append(r)
                print(
                    f"  round {i + 1} {name:>9}: first token {r[0] * 1000:7.1f} ms, {r[1]:6.1f} tokens/s, {r[2]} tokens"
                )
    finally:
        for backend in sides.values():
            backend.close()
    for name, rs in results.items():
        if any(n != args.max_tokens for _, _, n in rs):
            print(f"warning: {name} did not always produce {args.max_tokens} tokens", file=sys.stderr)
    speed = {name: statistics.median(r[1] for r in rs) for name, rs in results.items()}
    best = {name: max(r[1] for r in rs) for name, rs in results.items()}
    ttft = {name: statistics.median(r[0] for r in rs) for name, rs in results.items()}
    for name in sides:
        print(
            f"{name:>9} backend: {speed[name]:6.1f} tokens/s (median), {best[name]:6.1f} (best), "
            f"first token {ttft[name] * 1000:.1f} ms (median)"
        )
    print(
        f"ratio mlx / llama.cpp: {speed['mlx'] / speed['llama.cpp']:.2f}x decode (medians), "
        f"{best['mlx'] / best['llama.cpp']:.2f}x (bests)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
