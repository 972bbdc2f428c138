"""Unexpected exceptions: written to the log folder and shown in a dialog, never a silent exit."""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from datetime import datetime
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QObject, QThread, Signal
from PySide6.QtWidgets import QApplication, QMessageBox

log = logging.getLogger(__name__)

LOG_NAME = "app-errors.log"


class CrashReporter(QObject):
    """Installs itself as ``sys.excepthook`` (and ``threading.excepthook``).

    Each exception is appended to ``<logs>/app-errors.log``; on the GUI thread a dialog says what
    happened and where the details are (other threads hand the dialog to the GUI thread).
    """

    _show = Signal(str)

    def __init__(self, logs: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path = logs / LOG_NAME
        self.dialogs: list[QMessageBox] = []
        self._show.connect(self._dialog)
        self._previous = (sys.excepthook, threading.excepthook)

    def install(self) -> None:
        sys.excepthook = self.handle
        threading.excepthook = lambda args: self.handle(args.exc_type, args.exc_value, args.exc_traceback)

    def uninstall(self) -> None:
        sys.excepthook, threading.excepthook = self._previous

    def handle(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            QApplication.quit()
            return
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        try:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(f"--- {datetime.now().isoformat(timespec='seconds')}\n{text}\n")
        except OSError:
            pass
        log.error("unexpected error:\n%s", text)
        summary = f"{exc_type.__name__}: {exc}"
        self._show.emit(summary)  # queued to the GUI thread when raised elsewhere

    def _dialog(self, summary: str) -> None:
        app = QApplication.instance()
        if app is None or QThread.currentThread() is not app.thread():
            return
        box = QMessageBox(QMessageBox.Icon.Critical, "Hearth hit an unexpected error", "")
        box.setText("Something went wrong inside Hearth. Your chats are saved; you can keep working.")
        box.setInformativeText(f"{summary}\n\nDetails are in {self.path}. Please include them if you report this.")
        box.setObjectName("crashDialog")
        box.finished.connect(lambda _r, b=box: self.dialogs.remove(b) if b in self.dialogs else None)
        self.dialogs.append(box)
        box.open()
