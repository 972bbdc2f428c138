"""Prefix caching: time to first token of a request sharing a 1,000-token prefix with an earlier one.

The first request computes the whole prompt; the second finds the shared prefix's KV blocks in the
cache and computes only its own tail. Both use the paged engine on the starter model (CPU, float32).

Goal (issue 4): second TTFT <= 0.25x the first's.

    .venv/bin/python benchmarks/paged_prefix.py [--prefix 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

from paged_common import load_paged

SENTENCE = "The committee met again on Tuesday to review the budget, the schedule and the open questions. "


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from engine.types import GenerationRequest, SamplingParams

    paged = load_paged(n_ctx=2048)
    tok = paged.loaded.checkpoint.tokenizer
    params = SamplingParams(temperature=0.0, max_tokens=1)
    firsts, seconds, cached = [], [], []
    for r in range(args.rounds + 1):
        # a fresh prefix each round (a round number up front), so the first request always misses
        words = tok.encode(f"Round {r}. " + SENTENCE * (args.prefix // 15))[: args.prefix]
        prefix = tok.decode(words)

        def ttft(prompt: str) -> float:
            chunks = list(paged.stream(GenerationRequest(model="s", prompt=prompt, params=params)))
            cached.append(chunks[-1].cached_tokens)
            return chunks[-1].time_to_first_token

        a = ttft(prefix + " First question: what was decided?")
        b = ttft(prefix + " Second question: who attended?")
        if r:  # round 0 warms up
            firsts.append(a)
            seconds.append(b)
    a, b = statistics.median(firsts), statistics.median(seconds)
    print(f"shared prefix {args.prefix} tokens; second request reused {cached[-1]} cached tokens")
    print(f"first request TTFT:  {a * 1000:8.1f} ms  (rounds: {', '.join(f'{x * 1000:.0f}' for x in firsts)})")
    print(f"second request TTFT: {b * 1000:8.1f} ms  (rounds: {', '.join(f'{x * 1000:.0f}' for x in seconds)})")
    print(f"ratio second / first: {b / a:.3f} (goal <= 0.25)")
    paged.close()


if __name__ == "__main__":
    main()
