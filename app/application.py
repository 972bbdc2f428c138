"""Starting the desktop app: the window first (so it shows at once), then the engine behind it."""

from __future__ import annotations

import logging
import signal
import sys
import time

import psutil
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app.crash import CrashReporter
from app.gc_guard import GuiThreadCollector
from app.icons import app_icon
from app.main_window import MainWindow
from app.net.engine import EngineConfig, EngineController
from app.single_instance import SingleInstance, bring_to_front
from app.store.chat_store import ChatStore
from app.store.recovery import StoreTooNew
from app.store.settings_store import SettingsStore
from app.theme import ThemeManager
from app.widgets.markdown import render_blocks
from engine.paths import hearth_home, logs_dir

log = logging.getLogger(__name__)


def seconds_since_launch() -> float:
    """Seconds since this process started (what a person waits after double-clicking)."""
    return time.time() - psutil.Process().create_time()


def create_application(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    app.setApplicationName("Hearth")
    app.setApplicationDisplayName("Hearth")
    app.setOrganizationName("Hearth")
    app.setDesktopFileName("hearth")
    app.setWindowIcon(app_icon())
    return app


def quit_on_signals(app: QApplication) -> QTimer:
    """Ctrl-C or SIGTERM close the app the normal way (answers saved, worker stopped), not by
    killing it and leaving the worker behind. The timer lets Python run its handlers while Qt's
    event loop holds the thread."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: app.quit())
    heartbeat = QTimer(app)
    heartbeat.start(250)
    heartbeat.timeout.connect(lambda: None)
    return heartbeat


def run_app(*, engine_config: EngineConfig | None = None) -> int:
    """Open the main window, start the engine, and run until the window closes."""
    code, _report = _run(engine_config=engine_config, smoke=None)
    return code


def run_smoke(out: str, *, engine_config: EngineConfig | None = None):
    """Send one message, wait for the answer, save a screenshot to ``out``; a :class:`SmokeReport`."""
    _code, report = _run(engine_config=engine_config, smoke=out)
    return report


def hand_over(instance: SingleInstance) -> int:
    """Another Hearth holds the data folder: ask it to bring its window forward. The exit status:
    0 when it did, 1 (with a message) when it does not respond."""
    if instance.notify_running():
        log.info("Hearth is already running; its window was brought forward")
        return 0
    pid = instance.holder_pid
    message = (
        f"Hearth is already running{f' (process {pid})' if pid else ''} but does not respond; "
        "close it (or end that process) and start Hearth again."
    )
    log.error("%s", message)
    if QApplication.platformName() not in ("offscreen", "minimal"):
        QMessageBox.warning(None, "Hearth", message)
    return 1


def refuse_newer_store(exc: StoreTooNew) -> int:
    """A newer Hearth made the chat database: say so (a dialog where there is a screen) and exit 1,
    leaving the database as it is."""
    log.error("%s (its schema revision is %s)", exc, exc.revision)
    if QApplication.platformName() not in ("offscreen", "minimal"):
        QMessageBox.critical(None, "Hearth", str(exc))
    return 1


def _run(*, engine_config: EngineConfig | None, smoke: str | None):
    launched_at = psutil.Process().create_time()
    app = create_application()
    # A smoke run is a measurement, not the user's app: it neither claims the data folder nor defers.
    instance = None
    if smoke is None:
        instance = SingleInstance(hearth_home(), parent=app)
        if not instance.claim():
            return hand_over(instance), None
    quit_on_signals(app)
    collector = GuiThreadCollector(app)
    collector.start()
    reporter = CrashReporter(logs_dir(), app)
    reporter.install()
    try:
        store = ChatStore(hearth_home())
    except StoreTooNew as exc:
        reporter.uninstall()
        collector.stop()
        if instance is not None:
            instance.release()
        return refuse_newer_store(exc), None
    settings = SettingsStore(store).load()
    theme = ThemeManager(settings.theme, app)
    theme.apply()
    engine = EngineController(log_path=logs_dir() / "worker.log", parent=app)
    window = MainWindow(store=store, engine=engine, theme=theme)
    if instance is not None:
        instance.activated.connect(lambda: bring_to_front(window))
    window.show()
    shown_after = seconds_since_launch()
    times = psutil.Process().cpu_times()
    shown_cpu = times.user + times.system
    log.info("window shown %.2f s after launch", shown_after)
    engine.start(engine_config or EngineConfig.from_settings(settings))
    # Warm the Markdown and highlighting caches now, not on the first streamed token.
    QTimer.singleShot(0, lambda: render_blocks("```python\nx = 1\n```", theme.colors))
    smoke_run = None
    if smoke:
        from app.smoke import SmokeRun

        smoke_run = SmokeRun(window, out=smoke, shown_after=shown_after, shown_cpu=shown_cpu, launched_at=launched_at)
        smoke_run.start()
    try:
        code = app.exec()
    finally:
        window.controller.stop_all()
        engine.stop()
        store.close()
        reporter.uninstall()
        collector.stop()
        if instance is not None:
            instance.release()
    return code, (smoke_run.report if smoke_run is not None else None)
