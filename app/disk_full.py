"""DiskFullNotice: when an answer cannot be saved because the disk is full, the window says so (a
banner, not the crash dialog), the answer stays in memory, and a save is tried again every few
seconds (and at each save tick of a streaming answer) until the disk has room."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from app.store.chat_store import ChatStore
from app.widgets.banner import Banner

RETRY_MS = 2000
DISK_FULL_TEXT = (
    "The disk is full, so your answers are kept in memory but not saved; free some disk space and "
    "Hearth saves them at once."
)
SAVED_TEXT = "The disk has room again; every answer is saved."


class DiskFullNotice(QObject):
    """Shows :data:`DISK_FULL_TEXT` on ``banner`` while ``store`` holds answers back, and retries."""

    _changed = Signal(bool)  # the store may tell from another thread; Qt brings it to this one

    def __init__(self, store: ChatStore, banner: Banner, parent: QObject | None = None, *, retry_ms: int = RETRY_MS) -> None:
        super().__init__(parent)
        self.store = store
        self.banner = banner
        self.retry = QTimer(self)
        self.retry.setInterval(retry_ms)
        self.retry.timeout.connect(store.flush)
        self._changed.connect(self._show)
        self._stop = store.on_disk_full(self._changed.emit)

    def _show(self, full: bool) -> None:
        if full:
            self.banner.show_message(DISK_FULL_TEXT, level="error")
            self.retry.start()
            return
        self.retry.stop()
        if self.banner.text == DISK_FULL_TEXT:
            self.banner.show_message(SAVED_TEXT, level="info")
            QTimer.singleShot(6000, self.banner, self._hide_saved)

    def _hide_saved(self) -> None:
        if self.banner.text == SAVED_TEXT:
            self.banner.hide()

    def close(self) -> None:
        self.retry.stop()
        self._stop()
