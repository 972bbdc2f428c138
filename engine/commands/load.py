"""`hearth load` and `hearth unload`: load a model in the running worker, or unload one (or all)."""

from __future__ import annotations

import argparse
import sys

from engine import validation as valid
from engine.commands.load_flags import add_flags, given
from engine.commands.worker_client import WorkerClient, add_worker_args, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "load",
        help="load a model in the running worker",
        description="Load MODEL in the running worker (the daemon's, started when none runs, or --url's) now, instead "
        "of on its first request. "
        "Settings given here are for this load, over the model's saved ones (--save remembers them for every later "
        "load, requests' just-in-time loads included): a model loaded with others is reloaded (when no request uses "
        "it), and settings that do not fit are refused with what would.",
    )
    p.add_argument("model", metavar="MODEL", help="a model name, as `hearth models` lists it")
    add_flags(p)  # every load setting's
    p.add_argument("--ttl", type=valid.cli_type(_ttl), metavar="TIME",
                   help="unload it after it sat idle this long: seconds, or 10m, 1h, or never (default: the "
                        "worker's --idle-ttl)")  # fmt: skip
    p.add_argument("--save", action="store_true", help="remember these settings for every later load of MODEL")
    add_worker_args(p)
    p.set_defaults(run=run_load)
    u = sub.add_parser(
        "unload",
        aliases=["stop"],  # `ollama stop MODEL`
        help="unload a model (or all) from the running worker",
        description="Unload MODEL, or every model with --all, from the running worker; its memory is freed unless another "
                    "loaded name answers from the same weights (a model made from it, or a copy).",
    )
    u.add_argument("model", metavar="MODEL", nargs="?", help="a loaded model's name (`hearth ps`)")
    u.add_argument("--all", action="store_true", help="unload every loaded model")
    add_worker_args(u)
    u.set_defaults(run=run_unload)


def _ttl(text: str) -> str:
    """``--ttl`` checked here, sent as typed (the worker reads it with the same rule)."""
    valid.keep_alive(text, name="ttl")
    return text.strip()


def run_load(args: argparse.Namespace) -> int:
    client = WorkerClient.from_args(args, start=True)
    # A load may take minutes for a large model; the worker answers once it is loaded.
    body = {"model": args.model, **given(args).to_wire(), "save": args.save or None, "keep_alive": args.ttl}
    answer = client.request("POST", "/api/models/load", body={k: v for k, v in body.items() if v is not None}, timeout=600.0)
    out = {
        "name": answer["name"],
        "state": answer["state"],
        "backend": answer.get("backend"),
        "context_length": answer.get("n_ctx"),
        "context_length_trained": answer.get("n_ctx_train"),
        "keep_alive": answer.get("keep_alive"),
        "draft_refused": answer.get("draft_refused"),
        "saved": args.save,
    }
    # A draft asked for by name and refused is this load's failure; one the worker chose (auto) is a note.
    asked_draft = (args.speculative or "").strip().lower().startswith("draft:")
    if args.json:
        print_json(out)
    else:
        print(f"Loaded {out['name']} on {out['backend']} with {out['context_length']} tokens of context; "
              f"{_unloads(out['keep_alive'])}.")  # fmt: skip
        if args.save:
            print(f"Saved these settings: every later load of {out['name']} takes them.")
    if out["draft_refused"]:
        print(f"hearth: {'' if asked_draft else 'note: '}{out['draft_refused']}", file=sys.stderr)
        return 1 if asked_draft else 0
    return 0


def _unloads(keep_alive: float | None) -> str:
    from engine.durations import describe_duration

    if keep_alive is None:
        return "it stays loaded until unloaded"
    return f"it unloads after {describe_duration(keep_alive)} idle"


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
    kept: dict[str, list[str]] = {}  # name -> the loaded names its weights stay loaded for
    for name in names:
        answer = client.request("POST", "/api/models/unload", body={"model": name})
        if answer.get("unloaded"):
            unloaded.append(answer["name"])
            kept[answer["name"]] = [n for n in answer.get("weights_kept_for") or [] if n not in unloaded]
    if args.json:
        print_json({"unloaded": unloaded})
    elif unloaded:
        print(f"Unloaded {', '.join(unloaded)}.")
        for name, others in kept.items():
            if others:
                one = len(others) == 1
                print(f"{name}'s weights stay loaded for {', '.join(others)}, which {'answers' if one else 'answer'} "
                      f"from them too; unload {'it' if one else 'those'} as well to free their memory.")  # fmt: skip
    else:
        print("Nothing was loaded." if args.all else f"{names[0]} was not loaded.")
    return 0
