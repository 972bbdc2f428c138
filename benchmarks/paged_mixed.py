"""A mixed workload: the paged engine's continuous batching against transformers' padded batches.

32 requests (seeded), prompt lengths uniform in 20-300 tokens, max_tokens uniform in 16-128, EOS ignored,
all submitted at once to the paged engine. transformers' generate runs the same requests in left-padded
batches of 16, each batch running to its longest request, in a process of its own. Both sides count
useful output tokens only (the sum of max_tokens) over their wall time. Starter model, float32, CPU.

Goal (issue 4): paged >= 1.5x transformers in aggregate useful tokens/s.

    .venv/bin/python benchmarks/paged_mixed.py [--requests 32] [--batch 16] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import threading
import time

from paged_common import load_paged, stream_times
from sides import Child


def workload(n: int, seed: int, vocab: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    # ordinary tokens only (ids past the special ones), so every prompt is plain text
    return [([rng.randrange(100, vocab) for _ in range(rng.randint(20, 300))], rng.randint(16, 128)) for _ in range(n)]


def run_paged(backend, jobs) -> float:
    from engine.types import GenerationRequest, SamplingParams

    tok = backend.loaded.checkpoint.tokenizer
    streams = [backend.stream(GenerationRequest(model="s", prompt=tok.decode(p), params=SamplingParams(
        temperature=0.0, max_tokens=m, ignore_eos=True))) for p, m in jobs]  # fmt: skip
    counts = [0] * len(streams)
    t0 = time.perf_counter()

    def drain(i: int) -> None:
        counts[i] = stream_times(streams[i])[2]

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    assert counts == [m for _, m in jobs], "a request did not produce exactly its max_tokens"
    return elapsed


def run_hf(model, jobs, batch: int) -> float:
    total = 0.0
    for i in range(0, len(jobs), batch):
        part = jobs[i : i + batch]
        total += model.generate([p for p, _ in part], max(m for _, m in part))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    paged = load_paged(max_num_seqs=args.requests)
    hf = Child("paged_common:TransformersSide")  # a process of its own, as in sides.Child
    jobs = workload(args.requests, args.seed, paged.info.vocab_size)
    # the paged side re-tokenizes decoded text: use its own token ids on both sides
    tok = paged.loaded.checkpoint.tokenizer
    jobs = [(tok.encode_prompt(tok.decode(p)), m) for p, m in jobs]
    useful = sum(m for _, m in jobs)
    run_paged(paged, jobs[:2])  # warm-up
    t_paged = run_paged(paged, jobs)
    t_hf = run_hf(hf, jobs, args.batch)
    a, b = useful / t_paged, useful / t_hf
    print(f"{args.requests} requests, {sum(len(p) for p, _ in jobs)} prompt tokens, {useful} useful output tokens")
    print(f"paged engine (all at once):          {t_paged:7.1f} s  {a:7.2f} tokens/s")
    print(f"transformers (padded batches of {args.batch}): {t_hf:7.1f} s  {b:7.2f} tokens/s")
    print(f"ratio paged / transformers: {a / b:.2f}x (goal >= 1.5x)")
    paged.close()
    hf.close()


if __name__ == "__main__":
    main()
