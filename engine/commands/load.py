"""`hearth load` and `hearth unload`: load a model in the running worker, or unload one (or all)."""

from __future__ import annotations

import argparse
import sys

from engine.commands.worker_client import WorkerClient, add_worker_args, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "load",
        help="load a model in the running worker",
        description="Load MODEL in the running worker (the daemon's, or --url's) now, instead of on its first request.",
    )
    p.add_argument("model", metavar="MODEL", help="a model name, as `hearth models` lists it")
    add_worker_args(p)
    p.set_defaults(run=run_load)
    u = sub.add_parser(
        "unload",
        help="unload a model (or all) from the running worker",
        description="Unload MODEL, or every model with --all, from the running worker; its memory is freed.",
    )
    u.add_argument("model", metavar="MODEL", nargs="?", help="a loaded model's name (`hearth ps`)")
    u.add_argument("--all", action="store_true", help="unload every loaded model")
    add_worker_args(u)
    u.set_defaults(run=run_unload)


def run_load(args: argparse.Namespace) -> int:
    client = WorkerClient.from_args(args)
    # A load may take minutes for a large model; the worker answers once it is loaded.
    answer = client.request("POST", "/api/models/load", body={"model": args.model}, timeout=600.0)
    out = {
        "name": answer["name"],
        "state": answer["state"],
        "backend": answer.get("backend"),
        "context_length": answer.get("n_ctx"),
        "context_length_trained": answer.get("n_ctx_train"),
    }
    if args.json:
        print_json(out)
    else:
        print(f"Loaded {out['name']} on {out['backend']} with {out['context_length']} tokens of context.")
    return 0


def run_unload(args: argparse.Namespace) -> int:
    if bool(args.model) == bool(args.all):
        print("hearth: name one model to unload, or pass --all to unload every model.", file=sys.stderr)
        return 2
    client = WorkerClient.from_args(args)
    if args.all:
        from engine.commands.ps import loaded_models

        names = [row["name"] for row in loaded_models(client)]
    else:
        names = [args.model]
    unloaded = []
    for name in names:
        answer = client.request("POST", "/api/models/unload", body={"model": name})
        if answer.get("unloaded"):
            unloaded.append(answer["name"])
    if args.json:
        print_json({"unloaded": unloaded})
    elif unloaded:
        print(f"Unloaded {', '.join(unloaded)}.")
    else:
        print("Nothing was loaded." if args.all else f"{names[0]} was not loaded.")
    return 0
