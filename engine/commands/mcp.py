"""`hearth mcp`: the MCP servers the app's chats can use (the same saved list as the app's Tools dialog)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp",
        help="import or list the MCP servers the app's chats can use",
        description="The MCP servers the app's chats can use, saved in the data folder (docs/agent.md).",
    )
    actions = p.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    imp = actions.add_parser(
        "import",
        help="add the servers of an mcp.json file",
        description=(
            "Add the servers of an mcp.json file. Replacing a saved server of the same name asks first "
            "and clears its always-allowed tools."
        ),
    )
    imp.add_argument("file", metavar="FILE", help="an mcp.json file ({\"mcpServers\": {...}})")
    imp.add_argument("--yes", "-y", action="store_true", help="replace saved servers of the same name without asking")
    imp.set_defaults(run=run_import)
    ls = actions.add_parser("list", help="list the saved servers", description="List the saved MCP servers.")
    ls.set_defaults(run=run_list)


def _ask(names: tuple[str, ...]) -> bool:
    listed = ", ".join(names)
    sys.stderr.write(f"This replaces the saved MCP server(s) {listed} and clears their always-allowed tools. Replace? [y/N] ")
    sys.stderr.flush()
    try:
        answer = input().strip().lower()
    except (EOFError, KeyboardInterrupt):
        return False
    return answer in ("y", "yes")


def run_import(args: argparse.Namespace) -> int:
    from engine.agent.config import McpServerStore

    store = McpServerStore()
    plan = store.plan_import(args.file)
    if plan.replaces and not args.yes:
        if not sys.stdin.isatty():
            print(
                f"hearth: {args.file} would replace the saved MCP server(s) {', '.join(plan.replaces)}; "
                "nothing was imported, run it again with --yes to replace them.",
                file=sys.stderr,
            )
            return 1
        if not _ask(plan.replaces):
            print("Nothing was imported; the saved servers are as they were.", file=sys.stderr)
            return 1
    servers = store.apply_import(plan)
    print(f"Imported {len(servers)} MCP server(s): {', '.join(s.name for s in servers) or 'none'}.")
    if plan.replaces:
        print(f"Replaced {', '.join(plan.replaces)}; their always-allowed tools were cleared.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from engine.agent.config import McpServerStore

    store = McpServerStore()
    servers = store.servers()
    if not servers:
        print("No MCP servers. Import some with `hearth mcp import mcp.json`.")
        return 0
    allowed = store.always_allowed()
    width = max(len(s.name) for s in servers)
    for s in servers:
        state = "" if s.enabled else "  (off)"
        print(f"{s.name:<{width}}  {s.transport:<5}  {s.describe()}{state}")
        for key in (a for a in allowed if a.startswith(f"{s.name}/")):
            print(f"{'':<{width}}    always allowed: {key.split('/', 1)[1]}")
    return 0
