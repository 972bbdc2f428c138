"""The app and a running `hearth daemon`: it attaches to the daemon's worker instead of starting its own,
leaves it running when it stops, and runs a worker of its own once the daemon is gone."""

from __future__ import annotations

import httpx

from tests.app.conftest import WORKER_ARGS
from tests.engine.commands.daemon_helpers import daemon_down, daemon_up


def _ready(qtbot, engine, timeout_ms: int) -> None:
    qtbot.waitUntil(lambda: engine.state.ready or engine.state.kind == "failed", timeout=timeout_ms)
    assert engine.state.ready, engine.state.detail


def test_the_app_attaches_to_a_running_daemon_and_leaves_it_running(qtbot, tmp_path_factory, monkeypatch):
    from app.net import engine as engine_module
    from app.net.engine import EngineConfig, EngineController

    # the daemon's checks every 0.5 s, not 2: it is gone after two missed ones, a second after it stops, not four
    monkeypatch.setattr(engine_module, "DAEMON_CHECK_SECONDS", 0.5)
    home = tmp_path_factory.mktemp("attach-home")
    info = daemon_up(home)
    monkeypatch.setenv("HEARTH_HOME", str(home))
    engine = EngineController(log_path=home / "app-worker.log")
    try:
        engine.start(EngineConfig(extra_args=WORKER_ARGS))
        _ready(qtbot, engine, 60_000)
        assert engine.root_url == info["url"] and engine.supervisor is None
        assert engine.daemon is not None and engine.daemon.pid == info["pid"]
        # The app's requests carry the daemon's admin key, and reach the daemon's worker.
        r = httpx.get(f"{engine.root_url}/api/worker", headers={"Authorization": f"Bearer {engine.token}"}, timeout=10)
        assert r.status_code == 200 and r.json()["pid"] == info["worker_pid"]

        engine.stop()  # as when the app quits
        assert engine.state.kind == "stopped"
        assert httpx.get(f"{info['url']}/health", timeout=10).status_code == 200  # the daemon still serves

        engine.start(EngineConfig(extra_args=WORKER_ARGS))
        _ready(qtbot, engine, 60_000)
        assert engine.root_url == info["url"]
        assert daemon_down(home)["stopped"] is True
        # The daemon is gone: the app says so by starting its own worker, and is ready again.
        qtbot.waitUntil(lambda: engine.supervisor is not None, timeout=30_000)
        _ready(qtbot, engine, 120_000)
        assert engine.daemon is None and engine.root_url != info["url"]
        assert httpx.get(f"{engine.root_url}/health", timeout=10).status_code == 200
    finally:
        engine.stop()
        if (home / "daemon.json").exists():
            daemon_down(home)
