"""`hearth daemon`: the worker headless, with no window, in the background; the app and the CLI use it."""

from __future__ import annotations

import argparse
import sys

from engine import validation as valid
from engine.commands.load_flags import add_flag, serve_args
from engine.commands.serve import idle_ttl
from engine.commands.worker_client import print_json

# `hearth serve` flags a daemon passes on to its worker: the load settings a whole server takes
# (engine.commands.load_flags), each with the help given here.
_SETTINGS = {"n_ctx": "context length per sequence", "n_seq_max": "sequences decoded at once per model",
             "n_threads": "CPU threads per model", "kv_type": "KV cache type"}  # fmt: skip


def _add_worker_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=valid.whole(valid.PORT), default=None, help="port on 127.0.0.1 (default 8765; 0: any free one)")
    p.add_argument("--model", "-m", action="append", default=[],
                   help="load this model at start; `up` waits for it and fails with the reason if it does not load "
                        "(repeatable; others load on first request)")  # fmt: skip
    p.add_argument("--idle-ttl", type=valid.cli_type(idle_ttl), default=None,
                   help="unload a model after it sat idle this long: seconds, or 10m, 1h (default: never)")  # fmt: skip
    for name, text in _SETTINGS.items():
        add_flag(p, name, help=text)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "daemon",
        help="run the worker headless in the background (up, down, status, install)",
        description="The worker with no window, in the background. The app attaches to it instead of starting its "
        "own, and `hearth ps`, `load`, `unload` and `log stream` talk to it. Other apps reach its API at its URL "
        "(with HEARTH_API_KEY set when it started, they need that key).",
    )
    actions = p.add_subparsers(dest="daemon_command", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start the daemon in the background", description="Start the daemon in the "
                            "background and wait until it answers (nothing happens if it runs already).")  # fmt: skip
    _add_worker_flags(up)
    up.add_argument("--json", action="store_true", help="print JSON")
    up.set_defaults(run=run_up)
    down = actions.add_parser("down", help="stop the daemon", description="Stop the daemon: running requests end, "
                              "models are freed, the worker exits.")  # fmt: skip
    down.add_argument("--json", action="store_true", help="print JSON")
    down.set_defaults(run=run_down)
    status = actions.add_parser(
        "status", help="say whether the daemon runs, its URL and pid",
        description="Say whether the daemon runs, its URL and pid. Exit status 0 when it runs, 3 when it does not.",
    )  # fmt: skip
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(run=run_status)
    fg = actions.add_parser("run", help="run the daemon in the foreground (for service managers)",
                            description="Run the daemon in the foreground until Ctrl-C or SIGTERM.")  # fmt: skip
    _add_worker_flags(fg)
    fg.add_argument("--json", action="store_true", help="print JSON once the worker answers")
    fg.add_argument("--serve-arg", action="append", default=[], help=argparse.SUPPRESS)
    fg.set_defaults(run=run_foreground)
    for name, what in (("install", "start the daemon at every login"), ("uninstall", "no longer start it at login")):
        a = actions.add_parser(
            name, help=what,
            description=f"{what[0].upper()}{what[1:]}: a systemd user unit on Linux, a launchd agent on macOS, "
            "a Startup-folder entry on Windows.",
        )  # fmt: skip
        if name == "install":
            a.add_argument("--port", type=valid.whole(valid.PORT), default=None, help="port on 127.0.0.1 (default 8765)")
        a.add_argument("--json", action="store_true", help="print JSON")
        a.set_defaults(run=run_service)


def _serve_args(args: argparse.Namespace) -> tuple[str, ...]:
    out = [] if args.idle_ttl is None else ["--idle-ttl", str(args.idle_ttl)]
    return tuple(out + serve_args(args, tuple(_SETTINGS)))


def _port(args: argparse.Namespace) -> int:
    from engine.worker.daemon import DEFAULT_PORT

    return DEFAULT_PORT if args.port is None else args.port


def _status(info, running: bool) -> dict:
    if info is None or not running:
        return {"running": False, "url": None, "base_url": None, "pid": None, "worker_pid": None, "port": None,
                "started_at": None, "log_path": None}  # fmt: skip
    return {"running": True, **info.public()}


def run_up(args: argparse.Namespace) -> int:
    from engine.worker.daemon import find_daemon, start_daemon

    info = find_daemon()
    started = info is None
    if info is None:
        info = start_daemon(port=_port(args), models=tuple(args.model), serve_args=_serve_args(args))
    else:  # running already: the models asked for load in it, or say why not
        from engine.commands.worker_client import WorkerClient

        for model in args.model:
            WorkerClient(info.url, info.admin_key).request("POST", "/api/models/load", body={"model": model}, timeout=600.0)
    if args.json:
        print_json(_status(info, True) | {"started": started})
    elif started:
        print(f"The Hearth daemon is running at {info.base_url} (pid {info.pid}).")
    else:
        print(f"The Hearth daemon was already running at {info.base_url} (pid {info.pid}).")
    return 0


def run_down(args: argparse.Namespace) -> int:
    from engine.worker.daemon import pid_alive, read_info, stop_daemon

    info = read_info()
    running = info is not None and pid_alive(info.pid)
    if info is not None and running:
        stop_daemon(info)
    elif info is not None:  # left behind by a daemon that was killed
        from engine.worker.daemon import clear_info

        clear_info(info.pid)
    if args.json:
        print_json({"stopped": running, "pid": info.pid if running and info else None})
    elif running and info is not None:
        print(f"Stopped the Hearth daemon (pid {info.pid}).")
    else:
        print("No Hearth daemon is running.")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from engine.worker.daemon import answers, pid_alive, read_info

    info = read_info()
    running = info is not None and pid_alive(info.pid) and answers(info)
    if args.json:
        print_json(_status(info, running))
    elif running and info is not None:
        print(f"The Hearth daemon is running at {info.base_url} (pid {info.pid}, worker pid {info.worker_pid}).")
    elif info is not None and pid_alive(info.pid):
        print(f"The Hearth daemon (pid {info.pid}) is running but its worker does not answer; see {info.log_path}.")
    else:
        print("The Hearth daemon is not running; start it with `hearth daemon up`.")
    return 0 if running else 3


def run_foreground(args: argparse.Namespace) -> int:
    from engine.worker.daemon import run_daemon

    def announce(info) -> None:
        print_json(_status(info, True))
        sys.stdout.flush()

    return run_daemon(
        port=_port(args), models=tuple(args.model), serve_args=_serve_args(args) + tuple(args.serve_arg),
        announce=announce if args.json else None,
    )  # fmt: skip


def run_service(args: argparse.Namespace) -> int:
    from engine.worker.service import ServiceInstaller
    from engine.worker.supervisor import hearth_command

    installer = ServiceInstaller(hearth_command(), port=getattr(args, "port", None))
    result = installer.install() if args.daemon_command == "install" else installer.uninstall()
    if args.json:
        print_json(result.to_dict())
    else:
        print(result.message)
    return 0


__all__ = ["register"]
