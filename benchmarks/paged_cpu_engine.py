"""The paged engine on the CPU, in-process, as it steps now against without each of its CPU-side measures, in one run.

Variants, each in a fresh process (glibc's heap settings are per process), alternating order round by round, on
the same jobs (``paged_port.py``'s: a random model of hidden 64 with SmolLM2's vocabulary, prompts and answers
of uniform ``--lengths`` tokens, greedy, the end of text ignored, ``--streams`` at once):

- ``now``: the engine as it loads;
- ``mapped buffers``: without ``heap.keep_step_buffers``: each step's large buffers are mapped afresh and their
  pages faulted in and zeroed again, glibc's default;
- ``ignore_eos per request``: requests that ignore the end of text sample with their own samplers (the rows do
  not know the model's end tokens), not on the batched path;
- ``one padded attention``: a decode step attends every sequence padded to the batch's longest context, not in
  groups of similar length (``attention.GROUP_MIN_BATCH``);
- ``whole-batch race``: a sampled draw's noise computed for the whole batch at once in int64 (``race_noise``), not
  a block of rows at a time in int32 (``sampler._race_cpu``); only ``--temperature`` above 0 draws;
- ``none``: all four, as the engine stepped before any.

Prints each variant's output tokens/s (median over rounds) and its ratio to ``none``.

    python benchmarks/paged_cpu_engine.py                      # 256 streams, lengths 50-300, 2 rounds
    python benchmarks/paged_cpu_engine.py --lengths 100 1024 --rounds 3
    python benchmarks/paged_cpu_engine.py --temperature 0.8   # sampled: what the race costs
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from port_common import InProcess, make_jobs, tiny_model  # noqa: E402

VARIANTS = ("now", "mapped buffers", "ignore_eos per request", "one padded attention", "whole-batch race", "none")


def _child(args) -> int:
    """One variant's run, in this process: prints its summary as JSON."""
    from engine.backends.base import LoadOptions
    from engine.backends.paged import attention, heap, model_runner, sampler, sequence_rows
    from engine.backends.speculative import SpeculativeOptions

    if args.variant in ("mapped buffers", "none"):
        heap.keep_step_buffers = lambda *a, **k: False
    if args.variant in ("one padded attention", "none"):
        attention.GROUP_MIN_BATCH = 1 << 30
    if args.variant in ("whole-batch race", "none"):
        sampler._race_cpu = lambda probs, keys: (probs / sampler.race_noise(keys, probs.shape[1])).argmax(-1)
    if args.variant in ("ignore_eos per request", "none"):
        plain = sequence_rows.SequenceRows

        class RowsWithoutEnds(plain):
            def __init__(self, *a, end_ids=(), **k) -> None:
                super().__init__(*a, **k)

        model_runner.SequenceRows = RowsWithoutEnds
    options = LoadOptions(n_ctx=args.ctx, n_seq_max=args.streams, speculative=SpeculativeOptions.parse("off"))
    work = args.work
    engine = InProcess(work / "tiny-random", options)
    jobs = make_jobs(work / "smollm2-tokenizer", args.streams, tuple(args.lengths), seed=args.seed)
    print(json.dumps(engine.run(jobs, args.streams, temperature=args.temperature)), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256, help="requests, all in flight at once (default 256)")
    ap.add_argument("--lengths", type=int, nargs=2, default=(50, 300), metavar=("LO", "HI"),
                    help="prompt words and output tokens, each uniform in LO-HI (default 50 300)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=2, help="runs of every variant (default 2)")
    ap.add_argument("--ctx", type=int, default=4096, help="context per sequence (default 4096)")
    ap.add_argument("--temperature", type=float, default=0.0, help="sampled at this temperature (default 0: greedy)")
    ap.add_argument("--work", type=Path, default=None, help="folder for the model (default: a temporary one)")
    ap.add_argument("--variant", choices=VARIANTS, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.variant is not None:
        return _child(args)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        tiny_model(work)
        speeds: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(args.rounds):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                cmd = [sys.executable, __file__, "--variant", variant, "--seed", str(r), "--work", str(work),
                       "--streams", str(args.streams), "--lengths", *map(str, args.lengths), "--ctx", str(args.ctx),
                       "--temperature", str(args.temperature)]  # fmt: skip
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
                result = json.loads(out)
                speeds[variant].append(result["output_tokens_per_s"])
                print(json.dumps({"round": r + 1, "variant": variant, **result}), flush=True)
        base = statistics.median(speeds["none"])
        print(f"{args.streams} streams, lengths {args.lengths[0]}-{args.lengths[1]}, temperature {args.temperature:g}, "
              f"{args.rounds} rounds (medians):",
              file=sys.stderr)  # fmt: skip
        for variant in VARIANTS:
            tps = statistics.median(speeds[variant])
            print(f"  {variant:24s} {tps:8.0f} tok/s  {tps / base:5.2f}x", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
