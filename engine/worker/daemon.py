"""The headless daemon: the worker with no window, started by `hearth daemon up` and found by everything else.

``hearth daemon run`` is the daemon: a :class:`WorkerSupervisor` in the foreground that keeps one worker
alive (restarting it after a crash), writes ``daemon.json`` in the data folder once the worker answers,
and stops it and removes the file on SIGTERM or Ctrl-C. ``hearth daemon up`` starts that in the
background, detached from the terminal; a service manager (systemd, launchd) runs it directly.

``daemon.json`` (mode 0600 in the private data folder) names the daemon's pid, its worker's pid, the
worker's address and its admin key. The CLI's commands use it to reach the worker, and the app attaches
to the worker it names instead of starting its own.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from engine.errors import HearthError
from engine.paths import hearth_home, logs_dir, private_file
from engine.worker.net import bind_socket

log = logging.getLogger(__name__)

DAEMON_FILE = "daemon.json"
DEFAULT_PORT = 8765
# Seconds `hearth daemon up` waits for the worker to answer, and `down` for the daemon to end.
START_TIMEOUT = 120.0
STOP_TIMEOUT = 20.0


class DaemonError(HearthError):
    """The daemon could not be started, found or stopped."""


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """What ``daemon.json`` says about a running daemon.

    Attributes:
        pid: The daemon process (the supervisor; what `hearth daemon down` stops).
        worker_pid: Its worker process, which serves the API (a new one after a restart).
        url: The worker's root URL, ``http://127.0.0.1:PORT`` (the OpenAI API is under ``/v1``).
        port: The worker's port.
        admin_key: The key of every route, the admin routes included.
        started_at: When the daemon started (seconds since the epoch).
        log_path: Where the daemon and its worker write their logs.
    """

    pid: int
    worker_pid: int | None
    url: str
    port: int
    admin_key: str
    started_at: float
    log_path: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def public(self) -> dict:
        """Everything but the key, as `hearth daemon status --json` shows it."""
        out = asdict(self)
        del out["admin_key"]
        return out | {"base_url": self.base_url}


def daemon_file(home: Path | None = None) -> Path:
    return (home or hearth_home()) / DAEMON_FILE


def read_info(home: Path | None = None) -> DaemonInfo | None:
    """The daemon ``daemon.json`` names, alive or not; None when there is no readable file."""
    try:
        data = json.loads(daemon_file(home).read_text(encoding="utf-8"))
        return DaemonInfo(**{k: data[k] for k in DaemonInfo.__slots__})  # type: ignore[attr-defined]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_info(info: DaemonInfo, home: Path | None = None) -> None:
    """Write ``daemon.json`` readable by its owner only, whole or not at all."""
    path = daemon_file(home)
    tmp = private_file(path.with_name(f".{DAEMON_FILE}.{os.getpid()}.tmp"))
    tmp.write_text(json.dumps(asdict(info), indent=2), encoding="utf-8")
    os.replace(tmp, path)


def clear_info(pid: int, home: Path | None = None) -> None:
    """Remove ``daemon.json`` if it still names daemon ``pid`` (a newer daemon's file stays)."""
    info = read_info(home)
    if info is not None and info.pid == pid:
        daemon_file(home).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def answers(info: DaemonInfo, *, timeout: float = 3.0) -> bool:
    """Whether the worker ``info`` names is up and takes its admin key (``GET /api/worker``)."""
    import httpx

    try:
        with httpx.Client(timeout=timeout) as client:
            if client.get(f"{info.url}/health").status_code != 200:
                return False
            r = client.get(f"{info.url}/api/worker", headers={"Authorization": f"Bearer {info.admin_key}"})
    except httpx.HTTPError:
        return False
    return r.status_code == 200


def load_errors(info: DaemonInfo, *, timeout: float = 10.0) -> dict[str, str]:
    """The models the daemon's worker was started with that did not load, each with the reason."""
    import httpx

    try:
        r = httpx.get(f"{info.url}/api/worker", headers={"Authorization": f"Bearer {info.admin_key}"}, timeout=timeout)
        return dict(r.json().get("load_errors") or {})
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}


def find_daemon(home: Path | None = None, *, timeout: float = 3.0) -> DaemonInfo | None:
    """The running daemon whose worker answers with its admin key, or None."""
    info = read_info(home)
    if info is None or not pid_alive(info.pid):
        return None
    return info if answers(info, timeout=timeout) else None


# -- the daemon process ---------------------------------------------------------------------------------


def _check_port(host: str, port: int) -> None:
    if port == 0:
        return
    try:
        bind_socket(host, port).close()
    except OSError as exc:
        raise DaemonError(
            f"Port {port} on {host} is in use ({exc.strerror}), perhaps by `hearth serve` or the app; "
            "choose another with --port."
        ) from exc


def _refuse_second(home: Path | None) -> None:
    info = read_info(home)
    if info is not None and pid_alive(info.pid) and info.pid != os.getpid():
        raise DaemonError(
            f"A Hearth daemon is already running at {info.url} (pid {info.pid}); stop it with `hearth daemon down`."
        )


def run_daemon(
    *, port: int = DEFAULT_PORT, models: tuple[str, ...] = (), serve_args: tuple[str, ...] = (),
    home: Path | None = None, announce: Callable[[DaemonInfo], None] | None = None,
) -> int:  # fmt: skip
    """Run the daemon in the foreground until SIGTERM or Ctrl-C (what `hearth daemon run` and the service
    managers run). ``announce`` is told once the worker answers (default: a line on stdout).

    Raises:
        DaemonError: a daemon runs already, or the port is taken.
        WorkerStartError: the worker did not start.
    """
    from engine.worker.supervisor import WorkerEvent, WorkerSupervisor

    host = "127.0.0.1"
    _refuse_second(home)
    _check_port(host, port)
    log_path = logs_dir() / "daemon.log"
    stop = threading.Event()
    info: DaemonInfo | None = None

    def on_event(event: WorkerEvent) -> None:
        nonlocal info
        if event.kind == "ready" and info is not None and sup.pid != info.worker_pid:  # restarted after a crash
            info = replace(info, worker_pid=sup.pid)
            write_info(info, home)
        elif event.kind == "gave_up":
            log.error("%s", event.detail)
            stop.set()

    sup = WorkerSupervisor(
        host=host,
        port=port,
        # Other apps run models with HEARTH_API_KEY (or with no key on loopback); the admin key is the daemon's.
        api_key=os.environ.get("HEARTH_API_KEY", ""),
        admin_key=secrets.token_urlsafe(24),
        extra_args=(*serve_args, *(a for m in models for a in ("--model", m))),
        env={"HEARTH_API_KEYS": ""},
        log_path=log_path,
        on_event=on_event,
        startup_timeout=START_TIMEOUT,
    )
    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGBREAK", None)):
        if sig is not None:
            signal.signal(sig, lambda *_: stop.set())
    sup.start()
    try:
        info = DaemonInfo(
            pid=os.getpid(), worker_pid=sup.pid, url=sup.base_url.removesuffix("/v1"), port=sup.port,
            admin_key=sup.admin_key, started_at=time.time(), log_path=str(log_path),
        )  # fmt: skip
        write_info(info, home)
        if announce is not None:
            announce(info)
        else:
            print(f"Hearth daemon serving {info.base_url} (pid {info.pid})", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        clear_info(os.getpid(), home)
        sup.stop()
    return 1 if sup.gave_up else 0


# -- what `hearth daemon up|down` do from another process -------------------------------------------------


def _detached() -> dict:
    if sys.platform == "win32":
        flags = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.CREATE_NO_WINDOW
        return {"creationflags": flags}
    return {"start_new_session": True}  # no controlling terminal: closing it does not stop the daemon


def start_daemon(
    *, port: int = DEFAULT_PORT, models: tuple[str, ...] = (), serve_args: tuple[str, ...] = (),
    home: Path | None = None, timeout: float = START_TIMEOUT,
) -> DaemonInfo:  # fmt: skip
    """Start ``hearth daemon run`` in the background and wait until its worker answers, ``models`` loaded.

    Raises:
        DaemonError: it exited, or did not answer within ``timeout`` seconds, or one of ``models`` did not load
            (the load's own sentence; the daemon is stopped then).
    """
    from engine.worker.supervisor import hearth_command

    _refuse_second(home)
    _check_port("127.0.0.1", port)
    cmd = [*hearth_command(), "daemon", "run", "--port", str(port)]
    for model in models:
        cmd += ["--model", model]
    cmd += [f"--serve-arg={a}" for a in serve_args]
    log_path = logs_dir() / "daemon.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **_detached())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_info(home)
        if info is not None and info.pid == proc.pid and answers(info):
            failed = load_errors(info)
            if failed:  # `up` promised these models: a daemon without them is not what was asked for
                stop_daemon(info, home=home)
                raise DaemonError(next(iter(failed.values())))
            return info
        if proc.poll() is not None:
            raise DaemonError(f"The Hearth daemon exited (code {proc.returncode}); read {log_path} and try again.")
        time.sleep(0.2)
    _terminate(proc.pid)
    raise DaemonError(f"The Hearth daemon did not answer within {timeout:.0f} s; read {log_path} and try again.")


def _terminate(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)  # Windows: ends it at once (its worker follows it within a second)
    except OSError:
        pass


def stop_daemon(info: DaemonInfo, *, home: Path | None = None, timeout: float = STOP_TIMEOUT) -> None:
    """Stop the daemon ``info`` names: its worker ends its streams and frees its models, then it exits.

    Raises:
        DaemonError: it was still running after ``timeout`` seconds and a kill.
    """
    import psutil

    _terminate(info.pid)
    try:
        proc = psutil.Process(info.pid)
    except psutil.Error:
        proc = None  # gone already
    if proc is not None:
        try:
            proc.wait(timeout)
        except psutil.TimeoutExpired:
            log.warning("the daemon (pid %d) did not stop within %.0f s; killing it", info.pid, timeout)
            proc.kill()
            proc.wait(5)
        except psutil.Error:
            pass
    if info.worker_pid and pid_alive(info.worker_pid):  # a daemon killed without its cleanup leaves its worker
        _terminate(info.worker_pid)
    if pid_alive(info.pid):
        raise DaemonError(f"The Hearth daemon (pid {info.pid}) did not stop; end that process yourself.")
    clear_info(info.pid, home)


__all__ = [
    "DAEMON_FILE",
    "DaemonError",
    "DaemonInfo",
    "answers",
    "daemon_file",
    "find_daemon",
    "load_errors",
    "read_info",
    "run_daemon",
    "start_daemon",
    "stop_daemon",
]
