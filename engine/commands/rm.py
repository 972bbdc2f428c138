"""`hearth rm NAME`: remove a model (a download's files are deleted; an import's are left alone)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rm",
        help="remove a local model",
        description="Remove a model from Hearth. Downloaded models' files are deleted; imported files stay on disk.",
    )
    p.add_argument("name", help="the model's name (as `hearth models` lists it)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.catalog.registry import ModelRegistry
    from engine.errors import InvalidRequest

    registry = ModelRegistry()
    model = registry.resolve(args.name)
    if model.source == "starter":
        raise InvalidRequest("The starter model ships with Hearth and cannot be removed.")
    deletes = model.owns_files and not registry.shares_files(model)
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidRequest(f"Pass --yes to remove '{model.name}' without being asked.")
        what = f"Remove {model.name} and delete its files ({model.path})?" if deletes else f"Remove {model.name}?"
        if input(f"{what} [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing removed.")
            return 1
    registry.remove(model.name, delete_files=deletes)
    if model.origin:
        from engine.catalog.other_apps_sync import owner_sentence

        print(owner_sentence(model))
    elif deletes:
        print(f"Removed {model.name} and deleted its files.")
    else:
        print(f"Removed {model.name}; its files at {model.path} were left in place.")
    return 0
