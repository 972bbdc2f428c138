"""`hearth gui`: the desktop app (also what plain `hearth` opens)."""

from __future__ import annotations

import argparse
import importlib

from engine.errors import HearthError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gui",
        help="open the desktop app (the default with no command)",
        description="Open Hearth's desktop app.",
    )
    p.add_argument(
        "--smoke",
        metavar="OUT.png",
        help="send one message to the starter model, save a screenshot to OUT.png, print timings and exit",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # The CLI is the one place the engine hands over to the app; the import stays inside
    # run() so that `hearth --help` and the headless commands never load Qt.
    # Qt aborts the process when it cannot open a window; say what to install before it tries.
    problem = importlib.import_module("app.display").display_problem()
    if problem:
        raise HearthError(problem)  # the CLI prints it as one line and exits with status 1
    application = importlib.import_module("app.application")
    if args.smoke:
        report = application.run_smoke(args.smoke)
        print(report.text())
        return report.exit_code
    return application.run_app()
