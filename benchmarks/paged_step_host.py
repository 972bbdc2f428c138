"""The paged engine's whole decode step on the host, this checkout against another, in one run.

A step is drafting, scheduling, preparing the inputs, running the model, sampling, recording what each sequence
got and handing the step's outputs back (``LLMEngine.step``). Here the model is tiny (hidden 16, one layer, a
16-token vocabulary) and every sequence decodes with a short context, so what is timed is the host's work: on a
GPU the model's part is the device's, and all the rest is what the host adds to every step.

Each side runs in a fresh process of its own (``--against`` names the other checkout's folder, e.g. a
``git worktree`` of an older commit), alternating round by round; the ratio is the other side's median over this
checkout's. One torch thread: the machine may be shared, so read the ratio more than the milliseconds.

    python benchmarks/paged_step_host.py --against /tmp/older        # 256 sequences
    python benchmarks/paged_step_host.py --against /tmp/older --seqs 64 --rounds 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, statistics, sys, time
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
import torch
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.llm_engine import LLMEngine
from engine.backends.paged.model_runner import ModelRunner
from engine.backends.paged.models.qwen3 import Model, ModelArgs
from engine.backends.paged.sampler import RequestSampler
from engine.backends.paged.sequence import Sequence
from engine.types import SamplingParams

n, context, steps = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
torch.manual_seed(0)
vocab = 16
args = ModelArgs.from_dict(dict(model_type="qwen3", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=8, intermediate_size=32, vocab_size=vocab))
config = EngineConfig(max_num_seqs=n, max_model_len=context + 4 * steps + 64, max_num_batched_tokens=8192)
try:
    runner = ModelRunner(Model(args), config, torch.device("cpu"), end_ids=[0])
except TypeError:  # a checkout from before the runner knew the model's end tokens
    runner = ModelRunner(Model(args), config, torch.device("cpu"))
num_blocks = n * (-(-config.max_model_len // config.block_size) + 1)
runner.allocate_kv_cache(num_blocks)
engine = LLMEngine(runner, config, num_blocks)
for i in range(n):
    params = SamplingParams(temperature=0.0, max_tokens=10**6, ignore_eos=True)
    sampler = RequestSampler(params, vocab_size=vocab, eos_ids=[0], device=torch.device("cpu"))
    prompt = [1 + (i + j) % 15 for j in range(context)]
    engine.add(Sequence(prompt, params, block_size=config.block_size, owner=SimpleNamespace(sampler=sampler, drafter=None)))
while engine.scheduler.waiting or any(s.num_uncomputed_tokens > 1 for s in engine.scheduler.running):
    engine.step()
for _ in range(5):
    engine.step()
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    out = engine.step()
    times.append((time.perf_counter() - t0) * 1000)
assert len(out) == n
print(json.dumps({"step_ms": statistics.median(times)}))
"""


def run_side(root: Path, args) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(args.seqs), str(args.context), str(args.steps)],
                         capture_output=True, text=True, check=True, cwd=root, timeout=600)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])["step_ms"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, required=True, help="the other checkout's folder")
    ap.add_argument("--seqs", type=int, default=256, help="decoding sequences (default 256)")
    ap.add_argument("--context", type=int, default=16, help="each sequence's prompt tokens (default 16)")
    ap.add_argument("--steps", type=int, default=100, help="steps timed in each run (default 100)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each side, alternating (default 5)")
    args = ap.parse_args(argv)
    sides = {"this checkout": ROOT, "against": args.against.resolve()}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(args.rounds):
        order = list(sides.items()) if r % 2 == 0 else list(reversed(sides.items()))
        for name, root in order:
            times[name].append(run_side(root, args))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.seqs} decoding sequences, one step's host work (tiny model, one torch thread), median of "
          f"{args.rounds} runs of {args.steps} steps each:")  # fmt: skip
    for name, root in sides.items():
        print(f"  {name:14s} {med[name]:7.3f} ms   ({root}; runs: {', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"  against / this checkout = {med['against'] / med['this checkout']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
