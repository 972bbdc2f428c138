"""`hearth folders add|list|rm PATH`: the folders Hearth finds models in; downloads go to the first one online."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "folders",
        help="list, add or remove model folders",
        description="The folders Hearth finds models in, read in place (nothing is copied). Downloads go to the "
        "first folder that is there now; a folder on a drive taken out is shown as offline, and its models come "
        "back when it does.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="list the model folders")
    listing.add_argument("--json", action="store_true", help="print JSON")
    add = actions.add_parser("add", help="add a model folder (last; --first: downloads go to it)")
    add.add_argument("path", metavar="PATH")
    add.add_argument("--first", action="store_true", help="put it first: downloads go to it")
    add.add_argument("--json", action="store_true", help="print JSON")
    rm = actions.add_parser("rm", help="take a folder off the list (its files stay)")
    rm.add_argument("path", metavar="PATH")
    rm.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.catalog.model_folders import FolderList, folder_rows, sync_folders
    from engine.catalog.other_apps_sync import refresh
    from engine.catalog.registry import ModelRegistry

    registry = ModelRegistry()
    folders = FolderList(registry.home)
    said = None
    if args.action == "add":
        path = folders.add(args.path, first=args.first)
        added = sync_folders(registry)
        said = f"Added {path}; {len(added)} model{'s' if len(added) != 1 else ''} found in it."
    elif args.action == "rm":
        path = folders.remove(args.path)
        refresh(registry)
        sync_folders(registry)  # its models leave the list; their files stay
        said = f"Removed {path} from the model folders; its files were left in place."
    else:
        refresh(registry)
    rows = folder_rows(registry, sync=args.action not in ("add", "rm"))
    if args.json:
        print(json.dumps({"folders": rows}, indent=2))
        return 0
    if said:
        print(said)
        return 0
    for row in rows:
        state = "offline" if not row["online"] else f"{row['models']} model" + ("" if row["models"] == 1 else "s")
        mark = "  (downloads)" if row["downloads"] else ""
        print(f"{row['path']}  {state}{mark}")
    return 0
