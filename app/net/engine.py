"""EngineController: the worker process as the GUI sees it.

Wraps :class:`engine.worker.WorkerSupervisor`: starts it off the GUI thread, bridges its events
into the GUI thread with a signal, and restarts it with new settings when the user exposes the
API. The app's own requests always carry a per-launch token, the worker's admin key (documents,
downloads, load, delete, remotes). The key the user gives other apps only runs models; when the API is
shared with no key, other apps need none to run models, and still cannot reach the admin routes.

Where a Hearth daemon runs (`hearth daemon up`: its ``daemon.json`` names a live worker that takes the
admin key it holds), the app attaches to that worker instead of starting its own, uses the daemon's admin
key, and leaves the daemon running when it quits. If the daemon goes away, the app starts its own worker.
"""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

from app.store.records import DEFAULT_PORT, AppSettings
from engine.starter import STARTER_NAME

if TYPE_CHECKING:
    from engine.worker.daemon import DaemonInfo
    from engine.worker.supervisor import WorkerSupervisor

log = logging.getLogger(__name__)

ANY_HOST = "0.0.0.0"
# Seconds between two checks that an attached daemon still answers.
DAEMON_CHECK_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to run the worker. ``extra_args`` and ``env`` pass through to ``hearth serve``."""

    model: str | None = STARTER_NAME
    expose: bool = False
    port: int = DEFAULT_PORT
    api_key: str = ""
    lan: bool = False
    cors_origins: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())
    startup_timeout: float = 120.0

    @classmethod
    def from_settings(cls, settings: AppSettings, **overrides) -> EngineConfig:
        values = dict(
            model=settings.default_model or STARTER_NAME,
            expose=settings.expose_api,
            port=settings.port,
            api_key=settings.api_key,
            lan=settings.lan,
            cors_origins=settings.cors_origins,
        )
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True, slots=True)
class EngineState:
    """What the worker is doing: starting | ready | crashed | restarting | stopped | failed."""

    kind: str
    detail: str = ""
    root_url: str = ""  # http://127.0.0.1:PORT, without /v1

    @property
    def ready(self) -> bool:
        return self.kind == "ready"


class EngineController(QObject):
    """Owns the worker supervisor for the app. All signals arrive on the GUI thread."""

    state_changed = Signal(EngineState)
    # WorkerEvent and the generation it belongs to. Typed `object` so this module does not
    # import the supervisor (and the server modules behind it) before the window shows.
    _bridge = Signal(object, int)

    def __init__(self, *, log_path: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.log_path = log_path
        self.launch_token = secrets.token_urlsafe(24)
        self.config = EngineConfig()
        self.state = EngineState("stopped")
        self.supervisor: WorkerSupervisor | None = None
        self.daemon: DaemonInfo | None = None  # the daemon attached to, instead of a worker of the app's own
        self._api_key = ""
        self._generation = 0
        self._lock = threading.Lock()
        self._live: dict[int, WorkerSupervisor] = {}  # started or starting, by launch
        self._threads: list[threading.Thread] = []
        self._replaced = threading.Event()  # set when this launch is replaced or stopped
        self._bridge.connect(self._on_worker_event)

    # -- what the API client needs ------------------------------------------------------------
    @property
    def token(self) -> str:
        """The Bearer token the app sends: its own per-launch admin key."""
        return self._api_key

    @property
    def root_url(self) -> str:
        return self.state.root_url if self.state.ready else ""

    @property
    def public_url(self) -> str:
        """The base URL other apps use (only meaningful when the API is exposed)."""
        return f"http://127.0.0.1:{self.config.port}/v1"

    # -- life cycle ---------------------------------------------------------------------------
    def start(self, config: EngineConfig) -> None:
        """Start the worker in the background; :attr:`state_changed` tells how it goes."""
        self._launch(config)

    def apply(self, config: EngineConfig) -> None:
        """Restart the worker with ``config`` (in the background)."""
        self._launch(config)

    def stop(self) -> None:
        """Stop the worker now, and any being started (blocks a few seconds at most; at quit)."""
        with self._lock:
            self._generation += 1
            self._replaced.set()
            self._replaced = threading.Event()
            live = list(self._live.values())
            self._live.clear()
            threads = list(self._threads)
        self.supervisor = None
        self.daemon = None  # an attached daemon keeps running: it is not the app's to stop
        for sup in live:
            sup.stop(timeout=5)
        for thread in threads:
            thread.join(timeout=10)  # a start in progress notices the stop and cleans up
        self._set_state(EngineState("stopped"))

    def _supervisor_for(self, config: EngineConfig, api_key: str, generation: int) -> WorkerSupervisor:
        from engine.worker.supervisor import WorkerSupervisor

        env = dict(config.env)
        env["HEARTH_API_KEYS"] = config.api_key if config.expose else ""  # never the shell's keys; inference only
        args = list(config.extra_args)
        for origin in config.cors_origins:
            args += ["--cors-origin", origin]
        host = (ANY_HOST if config.lan else "127.0.0.1") if config.expose else "127.0.0.1"
        return WorkerSupervisor(
            host=host,
            port=config.port if config.expose else 0,
            # Not shared: the app's token is the only key. Shared: other apps run models with the user's
            # key (or none), and only the app's token opens the admin routes.
            api_key="" if config.expose else api_key,
            admin_key=api_key,
            model=config.model,
            extra_args=args,
            env=env,
            log_path=self.log_path,
            startup_timeout=config.startup_timeout,
            on_event=lambda event: self._bridge.emit(event, generation),
        )

    def _current(self, generation: int) -> bool:
        with self._lock:
            return generation == self._generation

    def _launch(self, config: EngineConfig) -> None:
        api_key = self.launch_token
        with self._lock:
            self._generation += 1
            self._replaced.set()
            self._replaced = threading.Event()
            generation = self._generation
            previous = list(self._live.values())
            self._live.clear()
            self._threads = [t for t in self._threads if t.is_alive()]
        self.config = config
        self._api_key = api_key
        self.supervisor = None
        self.daemon = None
        self._set_state(EngineState("starting", "Starting the engine…"))

        def run() -> None:
            # Off the GUI thread: importing the supervisor (and the server modules behind it),
            # stopping the old worker, waiting for the new one's health.
            from engine.worker.daemon import find_daemon
            from engine.worker.supervisor import WorkerEvent, WorkerStartError

            for old in previous:
                old.stop(timeout=5)
            daemon = find_daemon()
            if daemon is not None:  # `hearth daemon up` runs one: use it, start none
                self._bridge.emit(daemon, generation)
                self._watch_daemon(daemon, generation)
                return
            try:
                sup = self._supervisor_for(config, api_key, generation)
            except Exception as exc:
                log.exception("the worker could not be prepared")
                self._bridge.emit(WorkerEvent("failed", f"The engine did not start: {exc}"), generation)
                return
            with self._lock:
                if generation != self._generation:
                    return  # replaced or stopped before it began
                self._live[generation] = sup
            self._bridge.emit(sup, generation)
            try:
                sup.start()
            except WorkerStartError as exc:
                self._bridge.emit(WorkerEvent("failed", str(exc)), generation)
            except Exception as exc:  # a port in use, a missing interpreter: say so, don't die
                log.exception("the worker did not start")
                self._bridge.emit(WorkerEvent("failed", f"The engine did not start: {exc}"), generation)
            if not self._current(generation):
                sup.stop(timeout=5)  # stopped while it was starting: leave no worker behind

        thread = threading.Thread(target=run, name="engine-start", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _watch_daemon(self, daemon: DaemonInfo, generation: int) -> None:
        """Until replaced or stopped, check that the attached daemon answers; say so when it no longer does."""
        from engine.worker.daemon import answers
        from engine.worker.supervisor import WorkerEvent

        misses = 0
        with self._lock:
            if generation != self._generation:
                return
            replaced = self._replaced
        while not replaced.wait(DAEMON_CHECK_SECONDS):
            misses = 0 if answers(daemon, timeout=DAEMON_CHECK_SECONDS) else misses + 1
            if misses >= 2:
                self._bridge.emit(WorkerEvent("daemon_gone"), generation)
                return

    @Slot(object, int)
    def _on_worker_event(self, event, generation: int) -> None:
        if not self._current(generation):
            return  # an old worker's last words (it was replaced on purpose)
        from engine.worker.daemon import DaemonInfo

        if isinstance(event, DaemonInfo):  # attached to a running daemon's worker
            self.daemon = event
            self._api_key = event.admin_key
            self._set_state(EngineState("ready", f"Using the Hearth daemon at {event.url}.", event.url))
            return
        from engine.worker.supervisor import WorkerEvent

        if isinstance(event, WorkerEvent) and event.kind == "daemon_gone":  # the app runs its own worker now
            log.warning("the Hearth daemon stopped answering; starting the app's own engine")
            self._launch(self.config)
            return
        if not hasattr(event, "kind"):
            self.supervisor = event  # the supervisor of this launch, made off the GUI thread
            return
        sup = self.supervisor
        if sup is None:
            return
        host = "127.0.0.1" if sup.host == ANY_HOST else sup.host
        wait = f" in {event.restart_in:g} s" if event.restart_in else ""
        messages = {
            "starting": "Starting the engine…",
            "ready": "The engine is ready.",
            "crashed": f"The engine stopped ({event.detail}); restarting{wait}…",
            "restarting": "The engine stopped; restarting…",
            "stopped": "The engine is stopped.",
        }
        detail = messages.get(event.kind, event.detail)
        kind = event.kind
        if kind == "failed":
            detail = event.detail
        elif kind == "gave_up":  # a crash loop: left stopped, with the worker's last words
            kind = "failed"
            detail = "\n".join([event.detail, *event.log_tail])
        root = f"http://{host}:{sup.port}" if event.kind == "ready" else ""
        self._set_state(EngineState(kind, detail, root))

    def _set_state(self, state: EngineState) -> None:
        self.state = state
        self.state_changed.emit(state)
