"""The paged engine's host cost of one decode step: preparing the inputs and sampling, before and after the
persistent rows (block tables and sampling parameters kept between steps).

"before" is the step preparation and the per-request sampler of commit 178b672, kept here as they were: a
Python list of every sequence's block table padded to the widest, copied element by element, and sampling
parameters gathered from each request. "after" is the engine's own ``ModelRunner.prepare`` (on the layout a
CUDA graph reads, and on the eager one) and ``sample_batched``. Both sides run alternately in one process,
on the CPU (a tiny model: only host work is measured; the vocabulary is 16 tokens so sampling's arithmetic is
nothing). The machine may be shared: read the ratio more than the milliseconds.

    python benchmarks/paged_host_cost.py --seqs 256 --context 4096
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from itertools import chain
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine.backends.paged.attention import AttentionMetadata  # noqa: E402
from engine.backends.paged.config import EngineConfig  # noqa: E402
from engine.backends.paged.model_runner import ModelRunner, StepBatch  # noqa: E402
from engine.backends.paged.sampler import RequestSampler, sample, sample_batched  # noqa: E402
from engine.backends.paged.scheduler import ScheduledSeq  # noqa: E402
from engine.backends.paged.sequence import Sequence  # noqa: E402
from engine.types import SamplingParams  # noqa: E402


def legacy_stage(host_np, host, parts):
    total = sum(len(values) for values, _ in parts)
    host_np[:total] = list(chain.from_iterable(values for values, _ in parts))
    src = host[:total].clone()
    out, offset = [], 0
    for values, shape in parts:
        out.append(src[offset : offset + len(values)].view(shape))
        offset += len(values)
    return out


def legacy_prepare(bs: int, host_np, host, scheduled) -> StepBatch:
    """ModelRunner.prepare as of 178b672 (decodes only: the case measured)."""
    decodes = list(scheduled)
    ids, pos, slots, sample_rows, sampled = [], [], [], [], []
    for item in decodes:
        seq, n = item.seq, item.num_rows
        c = seq.num_computed_tokens
        ids.extend(seq.token_ids[c : c + item.num_tokens])
        pos.extend(range(c, c + n))
        table = seq.block_table
        slots.extend(table[p // bs] * bs + p % bs for p in range(c, c + n))
        if item.samples:
            sample_rows.extend(range(len(ids) - 1, len(ids)))
            sampled.append(item)
    parts = [(ids, (len(ids),)), (pos, (len(pos),)), (slots, (len(slots),)), (sample_rows, (len(sample_rows),))]
    tables = [d.seq.block_table for d in decodes]
    width = max(map(len, tables))
    parts.append((list(chain.from_iterable(r + [0] * (width - len(r)) for r in tables)), (len(decodes), width)))
    dl = [d.seq.num_computed_tokens + 1 for d in decodes]
    parts.append((dl, (len(dl),)))
    views = iter(legacy_stage(host_np, host, parts))
    t_ids, t_pos, t_slots, t_rows = next(views), next(views), next(views), next(views)
    meta = AttentionMetadata(slot_mapping=t_slots.long(), num_decodes=len(decodes))
    meta.decode_block_tables, meta.decode_context_lens = next(views), next(views)
    meta.max_decode_context_len = max(dl)
    return StepBatch(t_ids, t_pos, meta, t_rows, sampled, len(decodes))


class GraphLayout:
    """Stands in for captured graphs, so prepare lays the step out as a graph reads it (no GPU here)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def size_for(self, n: int) -> int:
        return self.size if 0 < n <= self.size else 0


def build(n_seqs: int, context: int, vocab: int):
    from engine.backends.paged.models.qwen3 import Model, ModelArgs

    args = ModelArgs.from_dict(dict(model_type="qwen3", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=1, head_dim=8, intermediate_size=32, vocab_size=vocab))  # fmt: skip
    config = EngineConfig(max_num_seqs=n_seqs, max_model_len=context + 64, max_num_batched_tokens=8192)
    runner = ModelRunner(Model(args), config, torch.device("cpu"))
    bs, per_seq = config.block_size, -(-(context + 1) // config.block_size)
    seqs = []
    for i in range(n_seqs):
        params = SamplingParams(temperature=0.6, seed=i, max_tokens=10**6)
        sampler = RequestSampler(params, vocab_size=vocab, eos_ids=[], device=torch.device("cpu"))
        seq = Sequence([1] * (context + 1), params, block_size=bs, owner=SimpleNamespace(sampler=sampler, drafter=None))
        seq.block_table = list(range(i * per_seq, (i + 1) * per_seq))
        seq.num_computed_tokens = context
        seqs.append(seq)
    return runner, seqs


def timed(fn, iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1000 / iters


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, default=256)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    vocab = 16
    runner, seqs = build(args.seqs, args.context, vocab)
    scheduled = [ScheduledSeq(s, 1) for s in seqs]
    host = torch.empty(1 << 20, dtype=torch.int32)
    host_np = host.numpy()
    logits = torch.randn(args.seqs, vocab)
    samplers = [s.owner.sampler for s in seqs]
    histories = [(s.token_ids, s.num_prompt_tokens) for s in seqs]
    graph = GraphLayout(args.seqs)

    def new_prepare(layout):
        runner.graphs = layout
        return runner.prepare(scheduled, sample=True)

    batch = new_prepare(None)  # rows assigned and tables written once, as a running sequence has them
    eager_batch = batch
    sides = {
        "before: prepare": lambda: legacy_prepare(runner.config.block_size, host_np, host, scheduled),
        "after: prepare (graph layout)": lambda: new_prepare(graph),
        "after: prepare (eager layout)": lambda: new_prepare(None),
        "before: sampling": lambda: sample(logits, samplers, histories),
        "after: sampling": lambda: (sample_batched(logits, eager_batch.sampling).tolist(),
                                    runner.rows.count_draws(eager_batch.host_rows)),
    }  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(args.rounds):  # alternately, so both sides see the same machine
        for name, fn in sides.items():
            times[name].append(timed(fn, args.iters))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.seqs} decoding sequences at {args.context} tokens of context (block size {runner.config.block_size}),"
          f" host work per step, median of {args.rounds} rounds of {args.iters} (CPU, one thread, machine shared):")  # fmt: skip
    for k, v in med.items():
        print(f"  {k:34s} {v:8.3f} ms")
    before = med["before: prepare"] + med["before: sampling"]
    after = med["after: prepare (graph layout)"] + med["after: sampling"]
    print(f"  prepare: before/after (graph layout) = {med['before: prepare'] / med['after: prepare (graph layout)']:.1f}x, "
          f"(eager layout) = {med['before: prepare'] / med['after: prepare (eager layout)']:.1f}x")  # fmt: skip
    print(f"  sampling: before/after = {med['before: sampling'] / med['after: sampling']:.1f}x")
    print(f"  prepare + sampling: {before:.3f} ms -> {after:.3f} ms ({before / after:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
