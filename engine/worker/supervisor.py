"""Runs the worker as a separate process for the app: start, health-wait, restart, stop.

A crash of the worker (a segfault in a native library, an OOM kill) never takes the
caller down: the supervisor notices, reports it, and starts a new worker with backoff.
Ending the worker process returns every byte its models held.

Crash loops back off: a worker that dies within ``stable_after`` seconds of becoming healthy (or
never becomes healthy again) is a fast crash; each one doubles the wait before the next start, up
to ``max_backoff``. After ``max_fast_crashes`` fast crashes in a row the supervisor stops
restarting and reports ``gave_up`` with the last lines of the worker's log. A worker that stayed
up ``stable_after`` seconds starts the count afresh.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from engine.errors import HearthError
from engine.worker.net import bind_socket, free_port, local_url

log = logging.getLogger(__name__)


class WorkerStartError(HearthError):
    """The worker did not become healthy."""


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """A change in the worker's life: starting, ready, crashed, restarting, gave_up, stopped.

    ``restart_in`` (crashed) is the wait before the next start; ``log_tail`` (gave_up) holds the
    last lines the worker wrote to its log.
    """

    kind: str
    detail: str = ""
    exit_code: int | None = None
    restart_in: float | None = None
    log_tail: tuple[str, ...] = ()


def _instance(answer: httpx.Response) -> str | None:
    """The launch mark a /health answer gives, if it is a worker's."""
    try:
        body = answer.json()
    except ValueError:
        return None
    return body.get("instance") if isinstance(body, dict) else None


def hearth_command() -> list[str]:
    """How to start Hearth's CLI from this process (the frozen app starts itself)."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "engine.cli"]


class WorkerSupervisor:
    """Starts and watches one worker process.

    Args:
        host: Address the worker listens on.
        port: Port; 0 picks a free one at each start.
        api_key: Bearer token the worker requires; a random per-launch token when None. Without
            ``admin_key`` it opens every route; with one it only runs models.
        admin_key: The key for every route, the admin routes included (documents, downloads, load,
            delete, ...); the supervisor's own requests (``headers()``) carry it. Empty: none.
        model: Model the worker loads at start.
        extra_args: More `hearth serve` arguments (e.g. ``["--backend", "llamacpp"]``).
        env: Extra environment for the worker.
        log_path: File the worker's output goes to (appended).
        on_event: Called (from a supervisor thread) with each :class:`WorkerEvent`.
        startup_timeout: Seconds to wait for health before giving up on a start.
        max_backoff: Longest wait between restarts after repeated crashes.
        initial_backoff: Wait before restarting after the first fast crash.
        stable_after: Seconds of uptime after which a crash no longer counts as fast.
        max_fast_crashes: Fast crashes in a row after which the worker is left stopped.
        log_tail_lines: How many of the worker's last log lines a ``gave_up`` event carries.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        admin_key: str = "",
        model: str | None = None,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        on_event: Callable[[WorkerEvent], None] | None = None,
        startup_timeout: float = 120.0,
        max_backoff: float = 30.0,
        initial_backoff: float = 1.0,
        stable_after: float = 60.0,
        max_fast_crashes: int = 5,
        log_tail_lines: int = 20,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.port = port
        self.api_key = api_key if api_key is not None else secrets.token_urlsafe(24)
        self.admin_key = admin_key
        self.model = model
        self.extra_args = list(extra_args)
        self.env = env or {}
        self.log_path = log_path
        self.on_event = on_event
        self.startup_timeout = startup_timeout
        self.max_backoff = max_backoff
        self.initial_backoff = initial_backoff
        self.stable_after = stable_after
        self.max_fast_crashes = max(1, max_fast_crashes)
        self.log_tail_lines = log_tail_lines
        self.restarts = 0
        self.gave_up = False
        self._ready_at = 0.0
        self._log_offset = 0
        self._proc: subprocess.Popen | None = None
        self._instance = ""  # the mark of the launch running now (its /health's "instance")
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._monitor: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """Where this machine reaches the worker (loopback even when it listens on every address)."""
        return local_url(self.host, self.port)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def headers(self) -> dict[str, str]:
        """The headers of a request that may use every route (the admin key where there is one)."""
        key = self.admin_key or self.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _emit(self, event: WorkerEvent) -> None:
        log.info("worker %s %s", event.kind, event.detail)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                log.exception("worker event handler failed")

    def _spawn(self) -> None:
        self.port = self.requested_port or free_port(self.host)
        cmd = [*hearth_command(), "serve", "--host", self.host, "--port", str(self.port), *self.extra_args]
        if self.model:
            cmd += ["--model", self.model]
        self._instance = secrets.token_hex(8)  # what this launch's /health says, and no other program's
        env = {**os.environ, **self.env, "HEARTH_PARENT_PID": str(os.getpid()), "HEARTH_INSTANCE": self._instance}
        # Keys go in the environment, not on the command line, where `ps` would show them; none of the shell's.
        for name, key in (("HEARTH_API_KEY", self.api_key), ("HEARTH_ADMIN_KEY", self.admin_key)):
            if key:
                env[name] = key
            else:
                env.pop(name, None)
        out = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        self._log_offset = out.tell() if out is not None else 0  # this run's lines start here
        try:
            self._proc = subprocess.Popen(
                cmd, stdout=out if out is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if out is not None else subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env,
            )  # fmt: skip
        finally:
            if out is not None:
                out.close()
        self._emit(WorkerEvent("starting", f"pid {self._proc.pid} on {self.base_url}"))

    def _wait_healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        url = self.base_url.removesuffix("/v1") + "/health"
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline and not self._stopping.is_set():
                proc = self._proc
                if proc is None or proc.poll() is not None:
                    return False
                try:
                    answer = client.get(url)
                    if answer.status_code == 200 and _instance(answer) == self._instance:
                        return True
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        return False

    def start(self) -> None:
        """Start the worker and wait until it answers /health.

        Raises:
            WorkerStartError: it exited or did not become healthy in time.
        """
        self._stopping.clear()
        if self.requested_port:  # taken by another program: say so, rather than start a worker that cannot listen
            try:
                bind_socket(self.host, self.requested_port).close()
            except OSError as exc:
                raise WorkerStartError(
                    f"Port {self.requested_port} is in use by another program; choose another port and try again."
                ) from exc
        with self._lock:
            self._spawn()
        if not self._wait_healthy(self.startup_timeout):
            code = self._proc.poll() if self._proc else None
            self._kill()
            where = f" (see {self.log_path})" if self.log_path else ""
            raise WorkerStartError(
                f"The Hearth worker did not start (exit code {code}){where}; check the log and try again."
            )
        self.gave_up = False
        self._ready()
        self._monitor = threading.Thread(target=self._watch, name="worker-monitor", daemon=True)
        self._monitor.start()

    def _ready(self) -> None:
        self._ready_at = time.monotonic()
        self._emit(WorkerEvent("ready", self.base_url))

    def _backoff(self, fast_crashes: int) -> float:
        return min(self.max_backoff, self.initial_backoff * 2 ** (fast_crashes - 1))

    def log_tail(self) -> tuple[str, ...]:
        """The last lines the current (or last) worker wrote to the log file."""
        if self.log_path is None:
            return ()
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(self._log_offset, f.seek(0, os.SEEK_END) - 64 * 1024))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ()
        lines = [line for line in text.splitlines() if line.strip()]
        return tuple(lines[-self.log_tail_lines :])

    def _give_up(self, code: int | None, crashes: int) -> None:
        self.gave_up = True
        where = f" (the log is {self.log_path})" if self.log_path else ""
        detail = (
            f"The engine crashed {crashes} times in a row within {self.stable_after:.0f} s of starting, so Hearth "
            f"stopped restarting it{where}; read its last lines, fix what they name and start it again."
        )
        self._emit(WorkerEvent("gave_up", detail, exit_code=code, log_tail=self.log_tail()))

    def _watch(self) -> None:
        fast_crashes = 0
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            if self._stopping.is_set():
                return
            # Uptime since it became healthy, not time since the restart began: a worker that
            # dies a second after every start is a crash loop however long its starts take.
            if time.monotonic() - self._ready_at >= self.stable_after:
                fast_crashes = 0
            fast_crashes += 1
            while True:
                if fast_crashes >= self.max_fast_crashes:
                    self._give_up(code, fast_crashes)
                    return
                backoff = self._backoff(fast_crashes)
                self._emit(WorkerEvent("crashed", f"exit code {code}", exit_code=code, restart_in=backoff))
                if self._stopping.wait(backoff):
                    return
                self._emit(WorkerEvent("restarting", f"attempt after {backoff:g} s"))
                with self._lock:
                    if self._stopping.is_set():
                        return
                    self._spawn()
                self.restarts += 1
                if self._wait_healthy(self.startup_timeout):
                    self._ready()
                    break
                if self._stopping.is_set():
                    return
                code = self._proc.poll() if self._proc else None
                self._kill()
                fast_crashes += 1  # a start that never became healthy is a fast crash too

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker: SIGTERM (streams end cleanly), then SIGKILL after ``timeout``."""
        self._stopping.set()
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=5)
        self._emit(WorkerEvent("stopped"))

    def restart(self) -> None:
        """Stop and start again (new settings take effect)."""
        self.stop()
        self.start()
