"""Hearth (llama.cpp backend) against a llama.cpp peer on the same GGUF, in one run.

The peer is llama.cpp's own C++ ``llama-server`` with ``--llama-server PATH`` (built for measurement
only, see benchmarks/peers.md), else ``python -m llama_cpp.server``. Starts both servers on loopback with
the same file, context per sequence, slots and thread count, then runs `hearth bench` with the peer as
the baseline and Hearth as --compare, at concurrency 1, 4 and 16, interleaved level by level. Every
request asks for --output-len tokens: Hearth and llama-server honour ignore_eos; llama_cpp.server does
not, so every server also gets a logit bias against the model's end-of-generation tokens.
llama_cpp.server runs with --interrupt_requests False (its default cuts off a running stream when the
next request comes) and --logits_all False (it need not keep every prompt token's logits).

Goals, read from the summary it prints:
- against llama_cpp.server (issue 9): at 16 streams Hearth's output tokens/s >= 1.8x the peer's, and
  Hearth's TTFT p99 <= 5 s;
- against llama-server (issue 16): one stream within 5% of its output tokens/s (ratio >= 0.95), first
  token (TTFT p50) within 10 ms of it, and 16 streams at least level (ratio >= 1.0).

    .venv/bin/python benchmarks/llamacpp_server_compare.py [--llama-server PATH] [--threads N] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from engine.starter import STARTER_NAME, starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", type=Path, default=starter_model_path(), help="GGUF file (default: the starter model)"
    )
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: Hearth's default)")
    ap.add_argument("--ctx", type=int, default=1024, help="context per sequence, both servers")
    ap.add_argument("--parallel", type=int, default=16, help="Hearth's sequence slots")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument(
        "--llama-server",
        type=Path,
        default=None,
        metavar="PATH",
        help="llama.cpp's llama-server binary as the peer",
    )
    ap.add_argument(
        "--requests", type=int, default=None, help="per level (default: hearth bench's, max(16, 4c))"
    )
    ap.add_argument("--input-len", default="uniform:32-128")
    ap.add_argument("--output-len", default="fixed:128")
    ap.add_argument(
        "--out", type=Path, default=Path("bench-out") / f"llamacpp-server-{datetime.now():%Y%m%d-%H%M%S}"
    )
    args = ap.parse_args(argv)

    from engine.backends.llamacpp.backend import default_threads
    from engine.bench.peers import LlamaCppPythonServer, LlamaServer, PeerServer, eos_ban
    from engine.worker.supervisor import WorkerSupervisor

    threads = args.threads or default_threads()
    args.out.mkdir(parents=True, exist_ok=True)
    extra_body = json.dumps(eos_ban(args.model))
    # Hearth serves the starter model under its registered name; any other file is loaded and requested by path.
    model = STARTER_NAME if args.model == starter_model_path() else str(args.model)
    hearth = WorkerSupervisor(
        port=0,
        api_key="",
        model=model,
        extra_args=["--backend", "llamacpp", "--parallel", str(args.parallel), "--ctx", str(args.ctx)]
        + ["--threads", str(threads)],
        log_path=args.out / "hearth-serve.log",
        startup_timeout=300,
    )
    peer: PeerServer
    if args.llama_server:
        peer = LlamaServer(
            args.llama_server, args.model, n_ctx=args.ctx, parallel=args.parallel, n_threads=threads,
            log_path=args.out / "llama-server.log",
        )  # fmt: skip
    else:
        peer = LlamaCppPythonServer(
            args.model, n_ctx=args.ctx, n_threads=threads, log_path=args.out / "llama-cpp-server.log"
        )
    label = peer.name if args.llama_server else "llama_cpp.server"
    hearth.start()
    try:
        peer.start()
        cmd = [sys.executable, "-m", "engine.cli", "bench", "--url", peer.url, "--compare", hearth.base_url]
        cmd += ["--label", label, "hearth", "--model-file", str(args.model), "--model", model]
        cmd += [
            "--concurrency",
            args.concurrency,
            "--input-len",
            args.input_len,
            "--output-len",
            args.output_len,
        ]
        cmd += ["--extra-body", extra_body, "--out", str(args.out)]
        if args.requests:
            cmd += ["--requests", str(args.requests)]
        print("$", shlex.join(cmd), flush=True)
        rc = subprocess.call(cmd)
    finally:
        peer.stop()
        hearth.stop()
    if rc != 0:
        return rc
    report = json.loads((args.out / "bench.json").read_text())
    by = {(r["server"], r["level"]): r for r in report["results"]}
    print()
    print(
        f"{'level':>5} {'peer tok/s':>11} {'hearth tok/s':>13} {'ratio':>6} {'hearth TTFT p99':>16} {'peer TTFT p99':>14}"
    )
    for level in sorted({r["level"] for r in report["results"]}):
        p, h = by.get((label, level)), by.get(("hearth", level))
        if not p or not h or not p["output_throughput_tok_s"] or not h["output_throughput_tok_s"]:
            continue
        ratio = h["output_throughput_tok_s"] / p["output_throughput_tok_s"]
        print(
            f"{level:>5g} {p['output_throughput_tok_s']:>11.1f} {h['output_throughput_tok_s']:>13.1f} {ratio:>5.2f}x "
            f"{h['ttft_s']['p99']:>15.2f}s {p['ttft_s']['p99']:>13.2f}s"
        )
    if args.llama_server:
        return _llama_server_summary(by, sorted({r["level"] for r in report["results"]}), label)
    top = max(r["level"] for r in report["results"])
    p, h = by.get((label, top)), by.get(("hearth", top))
    if p and h and p["output_throughput_tok_s"] and h["output_throughput_tok_s"]:
        ratio = h["output_throughput_tok_s"] / p["output_throughput_tok_s"]
        print(
            f"\nat {top:g} streams: throughput {ratio:.2f}x (goal >= 1.8x), Hearth TTFT p99 {h['ttft_s']['p99']:.2f} s (goal <= 5 s)"
        )
    return 0


def _llama_server_summary(by: dict, levels: list, label: str) -> int:
    """Issue 16's goals against llama-server: one stream within 5% and first token within 10 ms, 16 level."""
    ok = True
    for level in levels:
        p, h = by.get((label, level)), by.get(("hearth", level))
        if not p or not h or not p["output_throughput_tok_s"] or not h["output_throughput_tok_s"]:
            continue
        ratio = h["output_throughput_tok_s"] / p["output_throughput_tok_s"]
        ttft_gap_ms = (h["ttft_s"]["p50"] - p["ttft_s"]["p50"]) * 1000
        tpot = (h["tpot_s"]["p50"] / p["tpot_s"]["p50"]) if p["tpot_s"]["p50"] else float("nan")
        line = f"{level:g} stream(s): throughput {ratio:.3f}x, TPOT p50 {tpot:.3f}x, TTFT p50 {ttft_gap_ms:+.1f} ms vs {label}"
        if level == 1:
            met = ratio >= 0.95 and ttft_gap_ms <= 10
            line += f" (goal >= 0.95x and <= +10 ms: {'met' if met else 'NOT met'})"
            ok = ok and met
        elif level >= 16:
            met = ratio >= 1.0
            line += f" (goal >= 1.0x: {'met' if met else 'NOT met'})"
            ok = ok and met
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
