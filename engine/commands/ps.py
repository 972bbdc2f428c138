"""`hearth ps`: the models the running worker holds, their memory, context, slots, idle time and expiry."""

from __future__ import annotations

import argparse

from engine.commands.worker_client import WorkerClient, add_worker_args, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ps",
        help="list the models the running worker holds",
        description="List the models loaded in the running worker (the daemon's, or --url's): memory, context per "
        "request, slots, requests running, idle time and when each unloads.",
    )
    add_worker_args(p)
    p.set_defaults(run=run)


def loaded_models(client: WorkerClient) -> list[dict]:
    """Each loaded model as `hearth ps --json` lists it (stable keys)."""
    stats = client.request("GET", "/api/stats")
    engines = stats.get("models", {})
    rows = []
    for lm in stats.get("loaded", []):
        e = engines.get(lm["name"], {})
        rows.append(
            {
                "name": lm["name"],
                "backend": lm["backend"],
                "size_bytes": lm.get("size_bytes"),
                "context_length": e.get("n_ctx_per_sequence"),
                "slots": e.get("slots"),
                "running": e.get("running", 0),
                "waiting": e.get("waiting", 0),
                "in_use": lm.get("in_use", 0),
                "loaded_at": lm.get("loaded_at"),
                "idle_seconds": lm.get("idle_seconds"),
                "keep_alive": lm.get("keep_alive"),
                "expires_in": lm.get("expires_in"),
                "shares_weights_with": lm.get("shares_weights_with", []),
            }
        )
    return rows


def _duration(seconds: float | None) -> str:
    from engine.durations import describe_duration

    return "-" if seconds is None else describe_duration(seconds)


def _expiry(row: dict) -> str:
    """When the model unloads: "never" where nothing unloads it (no --idle-ttl, --ttl never)."""
    if row["keep_alive"] is None:
        return "never"
    if row["in_use"]:
        return f"{_duration(row['keep_alive'])} after use"
    return f"in {_duration(row['expires_in'])}"


def run(args: argparse.Namespace) -> int:
    from engine.commands.models import human_size

    client = WorkerClient.from_args(args)
    rows = loaded_models(client)
    if args.json:
        print_json({"url": client.url, "models": rows})
        return 0
    if not rows:
        print(f"No models are loaded in the worker at {client.url}. Load one with `hearth load MODEL`.")
        return 0
    table = [("NAME", "BACKEND", "MEMORY", "CONTEXT", "SLOTS", "ACTIVE", "IDLE", "UNLOADS")]
    for r in rows:
        size = human_size(r["size_bytes"]) if r["size_bytes"] is not None else "-"
        if r["shares_weights_with"]:  # one load: its memory is counted once, on the first of its names listed
            first = next(x["name"] for x in rows if x["name"] == r["name"] or x["name"] in r["shares_weights_with"])
            size = size if first == r["name"] else f"shared with {first}"
        active = f"{r['running']}+{r['waiting']}" if r["waiting"] else str(r["running"])
        idle = "in use" if r["in_use"] else _duration(r["idle_seconds"])
        table.append((r["name"], r["backend"], size, str(r["context_length"] or "-"), str(r["slots"] or "-"),
                      active, idle, _expiry(r)))  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
