"""`hearth log stream`: each request the running worker answers, as it finishes."""

from __future__ import annotations

import argparse
import json
import sys
import time

from engine import validation as valid
from engine.commands.worker_client import WorkerClient, add_worker_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "log",
        help="follow the running worker's requests",
        description="Follow what the running worker (the daemon's, or --url's) does.",
    )
    actions = p.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    s = actions.add_parser(
        "stream",
        help="print each request as it finishes",
        description="Print each request as it finishes: model, dialect, tokens, time to first token and tokens/s, "
        "until Ctrl-C. With --json, one JSON object a line.",
    )
    add_worker_args(s)
    s.add_argument("--count", type=valid.whole(valid.COUNT), default=None, metavar="N", help="stop after N requests")
    s.set_defaults(run=run_stream)


def _line(r: dict) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(r["time"]))
    ttft = f"{r['ttft_ms']:.0f} ms" if r["ttft_ms"] is not None else "-"
    rate = f"{r['tokens_per_second']:.1f} tok/s" if r["tokens_per_second"] is not None else "- tok/s"
    return (
        f"{when}  {r['model']}  {r['dialect']}  {r['status']}  "
        f"{r['prompt_tokens']} in / {r['completion_tokens']} out  first token {ttft}  {rate}"
    )


def run_stream(args: argparse.Namespace) -> int:
    client = WorkerClient.from_args(args)
    seen = 0
    try:
        for event in client.events("/api/log/stream"):
            if event is None:
                print(f"Following the requests of {client.url}; Ctrl-C stops.", file=sys.stderr, flush=True)
                continue
            if event.get("type") != "request":
                continue
            if event.get("dropped"):
                print(f"note: {event['dropped']} requests were missed (this terminal read too slowly).", file=sys.stderr)
            print(json.dumps(event) if args.json else _line(event), flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                return 0
    except KeyboardInterrupt:
        return 0
    return 0
