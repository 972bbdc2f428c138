"""Single-stream decode speed: the paged engine against transformers' generate, in one run.

Every side gets the same prompt tokens and decodes greedily exactly --tokens tokens, ignoring EOS,
on the starter model (SmolLM2-135M from its Q4_1 GGUF), CPU. Sides:

- transformers ``generate``, float32 (the weights dequantized): the reference;
- transformers ``generate``, bfloat16, for comparison;
- the paged engine, float32 (the same dequantized weights);
- the paged engine with ``quantization=int4``: the GGUF's 4-bit weights as the file stores them
  (groups of 32 with a scale and an offset; the same values the float32 sides compute with), on
  torch's int4 CPU matmul, with bfloat16 activations.

Decode speed excludes the first token: (n - 1) / (last token - first token) from the paged stream;
(n - 1) / (time for n tokens - time for 1 token) for transformers. Each side runs in a process of
its own (see ``sides.Child``); rounds alternate so a change in the machine's load falls on
every side, and medians are compared. Also printed: how many of each side's greedy tokens match the
float32 reference before the first difference.

Goal (issue 4): paged >= 2x transformers (float32).

    .venv/bin/python benchmarks/paged_single_stream.py [--tokens 64] [--rounds 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics

from sides import Child

PROMPT = (
    "The history of the river town began long before the first stone bridge was built. Farmers came down "
    "from the hills each spring to trade wool and grain, and the market by the water grew year by year."
)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for every side (default: torch's)")
    args = ap.parse_args()

    t = {"threads": args.threads}
    sides = {
        "transformers, float32": (Child("paged_common:TransformersSide", dtype="float32", **t), "ids"),
        "transformers, bfloat16": (Child("paged_common:TransformersSide", dtype="bfloat16", **t), "ids"),
        "paged engine, float32": (Child("paged_common:PagedSide", **t), "text"),
        "paged engine, int4 weights + bfloat16": (Child("paged_common:PagedSide", quantization="int4", **t), "text"),
    }
    prompt_ids = sides["paged engine, float32"][0].tokenize(PROMPT)
    speeds: dict[str, list[float]] = {name: [] for name in sides}
    tokens: dict[str, list[int]] = {}

    def round_of(name: str) -> None:
        child, takes = sides[name]
        speed, ids = child.decode_speed(prompt_ids if takes == "ids" else PROMPT, args.tokens)
        speeds[name].append(speed)
        tokens[name] = ids

    for name in sides:  # warm-up
        round_of(name)
        speeds[name].clear()
    names = list(sides)
    for i in range(args.rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            round_of(name)
    for child, _ in sides.values():
        child.close()

    ref_name = "transformers, float32"
    ref = statistics.median(speeds[ref_name])
    print(f"prompt {len(prompt_ids)} tokens, {args.tokens} new tokens, {args.rounds} rounds, threads: {args.threads or 'torch default'}")
    print(f"{'side':<40} {'tokens/s':>9} {'vs ' + ref_name:>28}  same greedy tokens as the reference")
    for name in sides:
        m = statistics.median(speeds[name])
        same = common_prefix(tokens[name], tokens[ref_name])
        rounds = ", ".join(f"{x:.1f}" for x in speeds[name])
        print(f"{name:<40} {m:9.2f} {m / ref:27.2f}x  first {same} of {args.tokens}   (rounds: {rounds})")
    fast = statistics.median(speeds["paged engine, int4 weights + bfloat16"])
    dense = statistics.median(speeds["paged engine, float32"])
    print(f"ratio paged (int4 weights) / transformers (float32): {fast / ref:.2f}x (goal >= 2x)")
    print(f"ratio paged / transformers at equal precision: float32 {dense / ref:.2f}x, "
          f"bfloat16 activations vs bfloat16 {fast / statistics.median(speeds['transformers, bfloat16']):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
