"""The worker process: owns the models and serves the API until Ctrl-C or SIGTERM."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.backends import LoadOptions
from engine.settings import ServerSettings
from engine.worker.net import base_url, bind_socket

if TYPE_CHECKING:
    from engine.pool import ModelManager

log = logging.getLogger(__name__)

#: (settings, model pool, catalog services) -> the ASGI app the worker serves.
AppFactory = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    settings: ServerSettings
    models: tuple[str, ...] = ()  # loaded at start, in order; /health says "loading" until they are
    backend: str | None = None
    idle_ttl: float | None = None
    load_options: LoadOptions = LoadOptions()
    memory_budget: int | None = None
    mmproj: Path | None = None  # with a model file: its multimodal projector


# Seconds a worker told to stop (SIGTERM, Ctrl-C) spends ending its streams and freeing its models before
# it exits regardless: a decode thread inside one long llama.cpp call cannot be interrupted, and the
# process must not wait for it (the app's supervisor, a service manager and a user all expect an end).
EXIT_GRACE_SECONDS = 4.0

# glibc's mallopt parameter for the most malloc arenas (M_ARENA_MAX).
_M_ARENA_MAX = -8
# Arenas the worker's allocations share. glibc gives each new thread an arena up to 8 per core, and a
# worker's threads (HTTP, streams, decode loops, loaders) come and go: memory freed in one arena is not
# reused by another, and a long run with models loaded and unloaded grows by fragmentation.
MALLOC_ARENAS = 2


def limit_malloc_arenas() -> None:
    """Share a few malloc arenas among the worker's threads (glibc only; nothing elsewhere, or when
    MALLOC_ARENA_MAX is set in the environment, which glibc has read already)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, MALLOC_ARENAS)
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl)
        pass


def start_preload(manager: ModelManager, models: Sequence[str], *, mmproj: Path | None = None) -> threading.Thread | None:
    """Load ``models`` one after the other in the background (`hearth serve --model`), ``mmproj`` paired with the
    last; until they are done ``manager.preloaded`` is clear, and each failure lands in ``preload_errors``."""
    from engine.errors import HearthError

    if not models:
        return None
    manager.preloaded.clear()

    def preload() -> None:
        try:
            for name in models:
                try:
                    if mmproj is not None and name == models[-1]:
                        manager.pair_projector(name, mmproj)
                    manager.load(name, allow_paths=True)  # `hearth serve --model PATH`: the user's own file
                except HearthError as exc:
                    log.error("could not load %s: %s", name, exc)
                    manager.preload_errors[name] = str(exc)
                except Exception as exc:  # a fault of Hearth's own: the next models still load, and it is shown
                    log.exception("could not load %s", name)
                    manager.preload_errors[name] = f"Could not load {name}: {type(exc).__name__}: {exc}; see the worker log."
        finally:
            manager.preloaded.set()

    thread = threading.Thread(target=preload, name="preload", daemon=True)
    thread.start()
    return thread


def run_worker(config: WorkerConfig, *, app_factory: AppFactory, announce=print) -> int:
    """Serve until interrupted. In-flight streams end with a final chunk on shutdown.

    Args:
        config: What to serve and how.
        app_factory: Builds the HTTP app over the model pool and the catalog (``engine.server.create_app``);
            passed in, so that the worker and the server never import each other.
        announce: Where the listening address is written.
    """
    from engine.worker.connections import WS_MAX_BYTES, raise_open_file_limit, server_config

    limit_malloc_arenas()  # before the worker starts its threads
    raise_open_file_limit()  # connections, model files and databases: the usual soft limit is 1,024
    from engine.catalog.registry import ModelRegistry
    from engine.collector import keep_objects_frozen
    from engine.errors import HearthError
    from engine.pool import ModelManager

    settings = config.settings
    registry = ModelRegistry()
    manager = ModelManager(
        registry,
        backend=config.backend,
        options=config.load_options,
        idle_ttl=config.idle_ttl,
        memory_budget=config.memory_budget,
    )
    from engine.catalog.services import CatalogServices

    catalog = CatalogServices(registry)
    app = app_factory(settings, manager, catalog)
    # Downloads cut off when the last worker ended carry on now.
    threading.Thread(target=catalog.resume_downloads, name="resume-downloads", daemon=True).start()
    try:
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        manager.close()
        raise HearthError(
            f"Cannot listen on {settings.host}:{settings.port} ({exc.strerror}); choose another --port."
        ) from exc
    port = sock.getsockname()[1]
    sockets = [sock]
    if settings.ollama_port is not None:
        try:
            sockets.append(bind_socket(settings.host, settings.ollama_port))
        except OSError as exc:
            manager.close()
            sock.close()
            raise HearthError(
                f"Cannot listen on {settings.host}:{settings.ollama_port} for Ollama's clients ({exc.strerror}); "
                "stop what uses it (perhaps Ollama itself) or choose another --ollama-port."
            ) from exc
    if not settings.is_loopback:
        print(
            f"hearth: warning: listening on {settings.host}, reachable from other machines"
            + ("" if settings.has_key else " with no API key"),
            file=sys.stderr,
        )
    # what is built now serves every request: out of the collector's walks, which stalled every stream for
    # 115-140 ms each (the pool freezes again after each load and unload)
    keep_objects_frozen()
    start_preload(manager, config.models, mmproj=config.mmproj)

    ws_max = max(WS_MAX_BYTES, settings.max_body_bytes + 64 * 1024)  # a frame past --max-body is answered, not cut
    server = _Server(server_config(app, timeout_graceful_shutdown=10, ws_max_size=ws_max), manager=manager)
    _exit_with_parent(server)
    announce(f"Hearth API listening on {base_url(settings.host, port)}")
    if len(sockets) > 1:
        announce(f"Ollama's API also on {base_url(settings.host, sockets[1].getsockname()[1]).removesuffix('/v1')}")
    sys.stdout.flush()
    try:
        server.run(sockets=sockets)
    finally:
        catalog.close()
        manager.close()
        for s in sockets:
            s.close()
    return 0


def _exit_with_parent(server) -> None:
    """A worker started by the app ends when the app is gone, even after a SIGKILL of the app."""
    parent = os.environ.get("HEARTH_PARENT_PID")
    if not parent or not parent.isdigit():
        return
    import signal

    import psutil

    pid = int(parent)

    def alive() -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def watch() -> None:
        while alive():
            if server.should_exit:
                return
            threading.Event().wait(1.0)
        log.warning("the app (pid %d) is gone; stopping", pid)
        server.handle_exit(signal.SIGTERM, None)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _exit_after(seconds: float) -> None:
    """End the process ``seconds`` from now, whatever its other threads are doing."""
    time.sleep(seconds)
    log.warning("shutdown took over %g s (a model call did not return); exiting now", seconds)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _make_server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """Cancels every generation at shutdown so each stream ends with its final chunk."""

        def __init__(self, config, *, manager) -> None:
            super().__init__(config)
            self.manager = manager
            self._watchdog: threading.Thread | None = None

        def handle_exit(self, sig, frame) -> None:
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=_exit_after, args=(EXIT_GRACE_SECONDS,), name="exit-watchdog", daemon=True
                )
                self._watchdog.start()
            self.manager.stopping.set()
            for lm in self.manager.loaded():
                lm.backend.cancel_all()
            super().handle_exit(sig, frame)
            # Shut down and return (freeing the models) instead of re-raising the signal.
            self._captured_signals.clear()

    return Server


def _Server(config, *, manager):  # noqa: N802 - a class made on first use keeps uvicorn's import lazy
    return _make_server_class()(config, manager=manager)
