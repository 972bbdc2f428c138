"""The paged engine through Hearth's port (``hearth serve``, streamed HTTP) against the engine in-process, in one run.

A random-weight model (hidden 64, SmolLM2's vocabulary) on the CPU, so the host's work is the whole cost:
what the port adds shows undiluted. Each round runs both sides on jobs of the same lengths (prompts of uniform
``--lengths`` words, as many output tokens, greedy, end of text ignored; fresh words in every run, so no side
reads them from its prefix cache) in the order in-process, port, port, in-process, and prints each side's mean
and the ratio.

    python benchmarks/paged_port.py                          # 256 streams, lengths 100-1024
    python benchmarks/paged_port.py --streams 64 --lengths 50 200 --rounds 2
    python benchmarks/paged_port.py --stream-interval 100     # the server sends an answer's tokens every 100 ms
    python benchmarks/paged_port.py --port-idle               # the port's threads run only on idle CPU (Linux)

On a machine whose cores the engine's threads fill (two here), the port's work (one socket write a token a
stream, the client's read) shares those cores with the engine's threads: ``--port-idle`` shows how much of the
gap that sharing is, by putting the serving process's threads on ``SCHED_IDLE`` once loaded. It is a probe, not
a setting Hearth uses: a process without ``CAP_SYS_NICE`` cannot take its priority back.

The engine's own process has its OpenMP threads sleep between operations (``OMP_WAIT_POLICY=PASSIVE``): spinning
there would take the cores the server needs. In-process they spin for a while first (OpenMP's default), which
spares a wake-up at each of a small model's many short operations. ``--passive-waits`` runs the in-process side
with the engine process's waits, so what is left of the ratio is the port's own cost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from port_common import InProcess, Served, make_jobs, tiny_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256, help="requests, all in flight at once (default 256)")
    ap.add_argument("--lengths", type=int, nargs=2, default=(100, 1024), metavar=("LO", "HI"),
                    help="prompt words and output tokens, each uniform in LO-HI (default 100 1024)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=1, help="rounds of in-process, port, port, in-process (default 1)")
    ap.add_argument("--ctx", type=int, default=4096, help="context per sequence (default 4096)")
    ap.add_argument("--stream-interval", type=float, default=0.0, metavar="MS",
                    help="hearth serve's --stream-interval (default 0: every token as it comes)")  # fmt: skip
    ap.add_argument("--port-idle", action="store_true",
                    help="put the serving process's threads on SCHED_IDLE once loaded (Linux; a probe, see above)")  # fmt: skip
    ap.add_argument("--passive-waits", action="store_true",
                    help="the in-process engine's OpenMP threads sleep between operations, as the engine process's do")  # fmt: skip
    ap.add_argument("--work", type=Path, default=None, help="folder for the model (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.passive_waits:
        if "torch" in sys.modules:
            ap.error("--passive-waits must be set before torch is loaded; run the script on its own.")
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # read when OpenMP loads (with torch, below); the server's too

    from engine.backends.base import LoadOptions
    from engine.backends.speculative import SpeculativeOptions

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        tokenizer, model = tiny_model(work)
        flags = ["--parallel", str(args.streams), "--ctx", str(args.ctx), "--speculative", "off",
                 "--stream-interval", f"{args.stream_interval:g}"]  # fmt: skip
        options = LoadOptions(n_ctx=args.ctx, n_seq_max=args.streams, speculative=SpeculativeOptions.parse("off"))
        inproc = InProcess(model, options)
        served = Served(model, flags, log=work / "serve.log")
        try:
            served.load()
            if args.port_idle:
                print(f"the serving process's {served.idle_priority()} threads run on SCHED_IDLE", file=sys.stderr)
            for r in range(args.rounds):
                # in-process, port, port, in-process: each side's figure is the mean of its two runs, so the
                # machine's drift over the round (10-15% here from minute to minute) weighs on both alike. Every
                # run has the round's lengths in fresh words: none reads another's prompts from a prefix cache.
                runs = []
                for k, side in enumerate(("in_process", "port", "port", "in_process")):
                    jobs = make_jobs(tokenizer, args.streams, tuple(args.lengths), seed=r, words=k)
                    if side == "in_process":
                        out = inproc.run(jobs, args.streams)
                    else:
                        out = served.run(jobs, args.streams)
                        out["server_threads"] = served.threads()  # as it finishes: every stream's thread, if any
                    runs.append((side, out))
                a = [out for side, out in runs if side == "in_process"]
                b = [out for side, out in runs if side == "port"]
                rate_a = sum(x["output_tokens_per_s"] for x in a) / 2
                rate_b = sum(x["output_tokens_per_s"] for x in b) / 2
                ratio = rate_b / rate_a
                failed = sum(x["failed"] for x in b)
                print(json.dumps({"round": r + 1, "in_process": a, "port": b, "ratio": round(ratio, 3)}), flush=True)
                print(f"round {r + 1}: in-process {rate_a:.0f} tok/s ({a[0]['output_tokens_per_s']:.0f}, "
                      f"{a[1]['output_tokens_per_s']:.0f}), port {rate_b:.0f} tok/s ({b[0]['output_tokens_per_s']:.0f}, "
                      f"{b[1]['output_tokens_per_s']:.0f}; {failed} failed): {ratio:.2f}x",
                      file=sys.stderr, flush=True)  # fmt: skip
        finally:
            served.close()
            inproc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
