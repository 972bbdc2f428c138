"""Single-stream decode speed: the paged engine against transformers' generate, in one run.

Both sides run the starter model (SmolLM2-135M dequantized from its GGUF, float32, CPU), get the same
prompt tokens and decode greedily exactly --tokens tokens, ignoring EOS. Decode speed excludes the
first token: paged = (n - 1) / (last token - first token) from the stream; transformers =
(n - 1) / (time for n tokens - time for 1 token). Rounds alternate so a change in the machine's load
falls on both sides; the medians are compared.

Goal (issue 4): paged >= 2x transformers.

    .venv/bin/python benchmarks/paged_single_stream.py [--tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

from paged_common import hf_generate, load_paged, load_transformers, stream_times

PROMPT = (
    "The history of the river town began long before the first stone bridge was built. Farmers came down "
    "from the hills each spring to trade wool and grain, and the market by the water grew year by year."
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from engine.types import GenerationRequest, SamplingParams

    paged = load_paged()
    hf = load_transformers()
    prompt = paged.tokenize(PROMPT)
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)

    def paged_round() -> float:
        first, last, n = stream_times(paged.stream(GenerationRequest(model="s", prompt=PROMPT, params=params)))
        return (n - 1) / (last - first)

    def hf_round() -> float:
        one = hf_generate(hf, [prompt], 1)
        full = hf_generate(hf, [prompt], args.tokens)
        return (args.tokens - 1) / (full - one)

    paged_round(), hf_round()  # warm-up
    ours, theirs = [], []
    for i in range(args.rounds):
        order = (paged_round, hf_round) if i % 2 == 0 else (hf_round, paged_round)
        for fn in order:
            (ours if fn is paged_round else theirs).append(fn())
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"prompt {len(prompt)} tokens, {args.tokens} new tokens, {args.rounds} rounds, {torch.get_num_threads()} threads")
    print(f"paged engine:  {a:7.2f} tokens/s  (rounds: {', '.join(f'{x:.1f}' for x in ours)})")
    print(f"transformers:  {b:7.2f} tokens/s  (rounds: {', '.join(f'{x:.1f}' for x in theirs)})")
    print(f"ratio paged / transformers: {a / b:.2f}x (goal >= 2x)")
    paged.close()


if __name__ == "__main__":
    main()
