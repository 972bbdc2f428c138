"""The app's tests: a real window offscreen, a real worker with the starter model, real SQLite.

One worker serves the whole session (starting one takes seconds on a shared machine); each test
opens its own MainWindow over the session's data folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

# One decode thread: on two shared cores, llama.cpp threads spinning at barriers while other
# processes hold the CPUs slow decoding by ten times or more.
WORKER_ARGS = ("--parallel", "4", "--ctx", "1024", "--threads", "1")
ANSWER_TIMEOUT_MS = 90_000
# How a skipped test of the window on a real X server begins its reason (printed at the end of a run).
X11_SKIP_PREFIX = "no test of the window on a real X server:"


def wait_until(predicate, timeout: float, what: str) -> None:
    """Run the Qt event loop until ``predicate()`` holds (for fixtures, where qtbot is not available)."""
    from PySide6.QtTest import QTest

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        QTest.qWait(20)


@pytest.fixture(scope="session")
def theme(qapp):
    from app.theme import ThemeManager

    manager = ThemeManager("light", qapp)
    manager.apply()
    return manager


@pytest.fixture(scope="session")
def store(hearth_home: Path):
    from app.store import ChatStore

    chats = ChatStore(hearth_home)
    yield chats
    chats.close()


def start_engine(config, log_path: Path):
    from app.net.engine import EngineController

    engine = EngineController(log_path=log_path)
    engine.start(config)
    wait_until(lambda: engine.state.ready or engine.state.kind == "failed", 240, "the worker to start")
    assert engine.state.ready, f"{engine.state.detail} (log: {log_path})"
    return engine


@pytest.fixture(scope="session")
def engine(qapp, hearth_home: Path):
    from app.net.engine import EngineConfig

    controller = start_engine(EngineConfig(extra_args=WORKER_ARGS), hearth_home / "worker.log")
    yield controller
    controller.stop()


def open_window(qtbot, store, engine, theme):
    from app.main_window import MainWindow

    window = MainWindow(store=store, engine=engine, theme=theme)
    # A MainWindow has no parent, so Python owns it, and pytest-qt keeps only a weak reference: a test that holds
    # one of its pages and not the window would lose the window to the next garbage collection mid-test. The
    # closing hook holds it until pytest-qt closes it at the end of the test.
    qtbot.addWidget(window, before_close_func=lambda _closing, _held=window: None)
    window.show()
    qtbot.waitExposed(window)
    return window


@pytest.fixture
def window(qtbot, store, engine, theme):
    win = open_window(qtbot, store, engine, theme)
    yield win
    win.controller.stop_all()
    qtbot.waitUntil(lambda: not win.controller.answering_chats(), timeout=10_000)


@pytest.fixture
def chat_store(tmp_path):
    """A store of chats of the test's own."""
    from app.store import ChatStore

    chats = ChatStore(tmp_path)
    yield chats
    chats.close()


@pytest.fixture
def idle_window(qtbot, chat_store, theme):
    """The app's window over its own store and an engine that was never started (nothing is answered)."""
    from app.net.engine import EngineController

    engine = EngineController()
    window = open_window(qtbot, chat_store, engine, theme)
    yield window
    engine.deleteLater()


def pytest_terminal_summary(terminalreporter) -> None:
    """Say why the test of the window on a real X server did not run (it needs system packages)."""
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if X11_SKIP_PREFIX in reason:
            terminalreporter.write_line(reason[reason.index(X11_SKIP_PREFIX) :], yellow=True)
