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
  token (TTFT p50) within 10 ms of it, and 16 streams at least level (ratio >= 1.0);
- with --speculation-ab (issue 34): a second Hearth with `--speculative off` runs beside the first (the
  default, `--speculative auto`) in the same run, interleaved with it level by level; at 16 streams Hearth
  with speculation gives at least 1.0x the tokens/s of Hearth without it. The drafted and kept tokens of
  each level come from the answers' usage. --no-peer leaves the peer out (the A/B alone).

    .venv/bin/python benchmarks/llamacpp_server_compare.py [--llama-server PATH] [--threads N] [--requests N] [--rounds N]
    .venv/bin/python benchmarks/llamacpp_server_compare.py --speculation-ab [--no-peer] --concurrency 16

On a machine whose speed drifts from minute to minute (a shared VM), one round's ratio moves by 10-20%;
--rounds N repeats the levels with fresh prompts, alternating which server goes first, and judges the
goals on the medians.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
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
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of every level, each with prompts of its own; goals use the medians",
    )
    ap.add_argument(
        "--speculation-ab",
        action="store_true",
        help="also run Hearth with --speculative off, beside Hearth with speculation (auto), and print the ratio",
    )
    ap.add_argument("--no-peer", action="store_true", help="with --speculation-ab: no peer, Hearth against itself")
    ap.add_argument("--input-len", default="uniform:32-128")
    ap.add_argument("--output-len", default="fixed:128")
    ap.add_argument(
        "--out", type=Path, default=Path("bench-out") / f"llamacpp-server-{datetime.now():%Y%m%d-%H%M%S}"
    )
    args = ap.parse_args(argv)
    if args.no_peer and not args.speculation_ab:
        ap.error("--no-peer leaves nothing to compare without --speculation-ab")

    from engine.backends.llamacpp.backend import default_threads
    from engine.bench.peers import LlamaCppPythonServer, LlamaServer, PeerServer, eos_ban
    from engine.catalog.registry import resolve_model
    from engine.worker.supervisor import WorkerSupervisor

    threads = args.threads or default_threads()
    args.out.mkdir(parents=True, exist_ok=True)
    extra_body = json.dumps(eos_ban(args.model))
    # Hearth loads the file by its path and serves it under its name (a registered file's, else the file's own):
    # over HTTP a model is asked for by name.
    load = STARTER_NAME if args.model == starter_model_path() else str(args.model)
    model = resolve_model(load).name

    def hearth_server(speculative: str, log_name: str) -> WorkerSupervisor:
        return WorkerSupervisor(
            port=0,
            api_key="",
            model=load,
            extra_args=["--backend", "llamacpp", "--parallel", str(args.parallel), "--ctx", str(args.ctx)]
            + ["--threads", str(threads), "--speculative", speculative],
            log_path=args.out / log_name,
            startup_timeout=300,
        )

    hearth = hearth_server("auto", "hearth-serve.log")
    plain = hearth_server("off", "hearth-speculative-off.log") if args.speculation_ab else None
    peer: PeerServer | None
    if args.no_peer:
        peer = None
    elif args.llama_server:
        peer = LlamaServer(
            args.llama_server, args.model, n_ctx=args.ctx, parallel=args.parallel, n_threads=threads,
            log_path=args.out / "llama-server.log",
        )  # fmt: skip
    else:
        peer = LlamaCppPythonServer(
            args.model, n_ctx=args.ctx, n_threads=threads, log_path=args.out / "llama-cpp-server.log"
        )
    label = "" if peer is None else peer.name if args.llama_server else "llama_cpp.server"
    rounds: list[dict] = []
    try:
        hearth.start()
        servers = [(hearth.base_url, "hearth")]
        if plain is not None:
            plain.start()
            servers.append((plain.base_url, PLAIN))
        if peer is not None:
            peer.start()
            servers.insert(0, (peer.url, label))
        for r in range(args.rounds):
            # Each round has prompts of its own (no round is served from an earlier one's cache), and the
            # rounds alternate which server goes first at each level, so a machine that drifts favours neither.
            order = servers[:: 1 if r % 2 == 0 else -1]
            out = args.out if args.rounds == 1 else args.out / f"round-{r + 1}"
            cmd = [sys.executable, "-m", "engine.cli", "bench", "--url", order[0][0], "--compare"]
            cmd += [url for url, _ in order[1:]] + ["--label", *(name for _, name in order)]
            cmd += ["--model-file", str(args.model), "--model", model]
            cmd += [
                "--concurrency",
                args.concurrency,
                "--input-len",
                args.input_len,
                "--output-len",
                args.output_len,
            ]
            cmd += ["--extra-body", extra_body, "--out", str(out), "--seed", str(r * 7919)]
            if args.requests:
                cmd += ["--requests", str(args.requests)]
            print("$", shlex.join(cmd), flush=True)
            rc = subprocess.call(cmd)
            if rc != 0:
                return rc
            report = json.loads((out / "bench.json").read_text())
            rounds.append({(row["server"], row["level"]): row for row in report["results"]})
    finally:
        if peer is not None:
            peer.stop()
        if plain is not None:
            plain.stop()
        hearth.stop()
    levels = sorted({level for by in rounds for _, level in by})
    ok = True
    if plain is not None:
        ok = _speculation_summary(rounds, levels)
    if peer is None:
        return 0 if ok else 1
    print()
    print(
        f"{'round':>5} {'level':>5} {'peer tok/s':>11} {'hearth tok/s':>13} {'ratio':>6} {'TTFT p50 gap':>13} {'hearth TTFT p99':>16} {'peer TTFT p99':>14}"
    )
    for i, by in enumerate(rounds, 1):
        for level in levels:
            m = _measures(by, label, level)
            if m is None:
                continue
            p, h = by[(label, level)], by[("hearth", level)]
            print(
                f"{i:>5} {level:>5g} {p['output_throughput_tok_s']:>11.1f} {h['output_throughput_tok_s']:>13.1f} "
                f"{m['ratio']:>5.2f}x {m['ttft_gap_ms']:>+10.1f} ms {h['ttft_s']['p99']:>15.2f}s {p['ttft_s']['p99']:>13.2f}s"
            )
    if args.llama_server:
        return _llama_server_summary(rounds, levels, label) or (0 if ok else 1)
    top = levels[-1]
    ratios = [m["ratio"] for by in rounds if (m := _measures(by, label, top)) is not None]
    if ratios:
        ttft_p99 = statistics.median(
            by[("hearth", top)]["ttft_s"]["p99"] for by in rounds if ("hearth", top) in by
        )
        print(
            f"\nat {top:g} streams: throughput {statistics.median(ratios):.2f}x (median of {len(ratios)} round(s); "
            f"goal >= 1.8x), Hearth TTFT p99 {ttft_p99:.2f} s (goal <= 5 s)"
        )
    return 0 if ok else 1


PLAIN = "hearth-speculative-off"


def _drafts(row: dict) -> str:
    drafted, kept = row.get("draft_tokens"), row.get("accepted_draft_tokens")
    if drafted is None or kept is None:
        return "not reported"
    return f"{drafted} drafted, {kept} kept" + (f" ({kept / drafted:.0%})" if drafted else "")


def _speculation_summary(rounds: list[dict], levels: list) -> bool:
    """Hearth with speculation (auto) against Hearth without (off), in the same run: tokens/s ratio per level
    and round, the drafts, and issue 34's goal on the median at 16 streams or more (>= 1.0x)."""
    print(f"\n{'round':>5} {'level':>5} {'spec tok/s':>11} {'off tok/s':>10} {'ratio':>6}  drafts (speculation on)")
    for i, by in enumerate(rounds, 1):
        for level in levels:
            m = _measures(by, PLAIN, level)
            if m is None:
                continue
            on, off = by[("hearth", level)], by[(PLAIN, level)]
            print(f"{i:>5} {level:>5g} {on['output_throughput_tok_s']:>11.1f} {off['output_throughput_tok_s']:>10.1f} "
                  f"{m['ratio']:>5.2f}x  {_drafts(on)}")  # fmt: skip
    ok = True
    for level in levels:
        ratios = [m["ratio"] for by in rounds if (m := _measures(by, PLAIN, level)) is not None]
        if not ratios:
            continue
        line = f"{level:g} stream(s): speculation on / off {statistics.median(ratios):.3f}x (median of {len(ratios)} round(s))"
        if level >= 16:
            met = statistics.median(ratios) >= 1.0
            line += f" (goal >= 1.0x: {'met' if met else 'NOT met'})"
            ok = ok and met
        print(line)
    return ok


def _measures(by: dict, label: str, level: float) -> dict[str, float] | None:
    """Hearth against the peer at one level of one round: throughput ratio, TTFT p50 gap, TPOT p50 ratio."""
    p, h = by.get((label, level)), by.get(("hearth", level))
    if not p or not h or not p["output_throughput_tok_s"] or not h["output_throughput_tok_s"]:
        return None
    return {
        "ratio": h["output_throughput_tok_s"] / p["output_throughput_tok_s"],
        "ttft_gap_ms": (h["ttft_s"]["p50"] - p["ttft_s"]["p50"]) * 1000,
        "tpot": (h["tpot_s"]["p50"] / p["tpot_s"]["p50"]) if p["tpot_s"]["p50"] else float("nan"),
    }


def _llama_server_summary(rounds: list[dict], levels: list, label: str) -> int:
    """Issue 16's goals against llama-server, on the medians over the rounds: one stream within 5% and
    first token within 10 ms, 16 streams at least level."""
    ok = True
    for level in levels:
        ms = [m for by in rounds if (m := _measures(by, label, level)) is not None]
        if not ms:
            continue
        ratio = statistics.median(m["ratio"] for m in ms)
        gap = statistics.median(m["ttft_gap_ms"] for m in ms)
        tpot = statistics.median(m["tpot"] for m in ms)
        line = (
            f"{level:g} stream(s), median of {len(ms)} round(s): throughput {ratio:.3f}x, TPOT p50 {tpot:.3f}x, "
            f"TTFT p50 {gap:+.1f} ms vs {label}"
        )
        if level == 1:
            met = ratio >= 0.95 and gap <= 10
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
