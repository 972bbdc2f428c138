"""An unexpected exception goes to the log folder and a dialog, never a silent exit."""

from __future__ import annotations

import sys

from app.crash import CrashReporter
from engine.paths import logs_dir


def test_an_unexpected_error_is_logged_and_shown(qtbot, qapp):
    reporter = CrashReporter(logs_dir())
    reporter.install()
    try:
        assert sys.excepthook == reporter.handle
        try:
            raise ValueError("the flux capacitor is empty")
        except ValueError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        qtbot.waitUntil(lambda: bool(reporter.dialogs) and reporter.dialogs[0].isVisible(), timeout=5000)
        dialog = reporter.dialogs[0]
        assert "ValueError: the flux capacitor is empty" in dialog.informativeText()
        assert str(reporter.path) in dialog.informativeText()
        logged = reporter.path.read_text()
        assert "ValueError: the flux capacitor is empty" in logged and "Traceback" in logged
        dialog.accept()
    finally:
        reporter.uninstall()
    assert sys.excepthook != reporter.handle
