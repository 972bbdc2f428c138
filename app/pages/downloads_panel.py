"""DownloadsPanel: each download with a progress bar, speed, time left, pause/resume/cancel."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.net.api import HearthApi
from app.net.catalog_types import Download
from app.theme import ThemeColors
from app.units import human_bytes, human_duration, human_rate

POLL_MS = 700
STATE_TEXT = {"queued": "Waiting to start", "paused": "Paused", "done": "Done", "failed": "Failed", "cancelled": "Cancelled"}


def detail_text(d: Download) -> str:
    size = f"{human_bytes(d.bytes_done)} of {human_bytes(d.bytes_total)}" if d.bytes_total else human_bytes(d.bytes_done)
    if d.state == "running":
        return f"{size} · {human_rate(d.speed)} · {human_duration(d.eta)} left"
    if d.state == "failed":
        return f"Failed: {d.error or 'unknown error'}"
    if d.state == "done":
        return f"{human_bytes(d.bytes_total)} · ready as {d.model}" if d.model else "Done"
    return f"{STATE_TEXT.get(d.state, d.state)} · {size}"


class DownloadRow(QFrame):
    action = Signal(str, str)  # download id, pause | resume | cancel

    def __init__(self, download: Download, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Card")
        self.download = download
        column = QVBoxLayout(self)
        column.setContentsMargins(14, 10, 14, 10)
        top = QHBoxLayout()
        self.title = QLabel(f"<b>{download.repo}</b> · {download.variant}")
        top.addWidget(self.title, 1)
        self.pause = QPushButton("Pause")
        self.resume = QPushButton("Resume")
        self.cancel = QPushButton("Cancel")
        for name, button in (("pause", self.pause), ("resume", self.resume), ("cancel", self.cancel)):
            button.setObjectName(f"{name}Download")
            button.clicked.connect(lambda _c=False, n=name: self.action.emit(self.download.id, n))
            top.addWidget(button)
        column.addLayout(top)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(8)
        column.addWidget(self.bar)
        self.detail = QLabel()
        self.detail.setObjectName("Muted")
        column.addWidget(self.detail)
        self.update_download(download)

    def update_download(self, d: Download) -> None:
        self.download = d
        self.bar.setValue(int(d.fraction * 1000) if d.state != "done" else 1000)
        self.detail.setText(detail_text(d))
        self.pause.setVisible(d.state in ("queued", "running"))
        self.resume.setVisible(d.state == "paused")
        self.cancel.setVisible(d.active)


class DownloadsPanel(QWidget):
    model_arrived = Signal(str)  # the new local model's name
    message = Signal(str, bool)

    def __init__(self, api: HearthApi, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self.colors = colors
        self.rows: dict[str, DownloadRow] = {}
        self._seen_active: set[str] = set()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 12, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        holder = QWidget()
        self.list = QVBoxLayout(holder)
        self.list.setContentsMargins(0, 0, 0, 0)
        self.list.setSpacing(8)
        self.empty = QLabel("No downloads yet. Find a model under Discover.")
        self.empty.setObjectName("Muted")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.list.addWidget(self.empty)
        self.list.addStretch(1)
        scroll.setWidget(holder)
        outer.addWidget(scroll)
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.refresh)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors

    def refresh(self) -> None:
        call = self.api.downloads()
        call.succeeded.connect(self._downloads)
        call.failed.connect(self._failed)

    def _failed(self, error) -> None:
        self.timer.stop()
        if error.missing_endpoint:
            self.empty.setText(error.message)

    def _downloads(self, downloads: list[Download]) -> None:
        for d in downloads:
            row = self.rows.get(d.id)
            if row is None:
                row = DownloadRow(d)
                row.action.connect(self._act)
                self.rows[d.id] = row
                self.list.insertWidget(0, row)
            else:
                row.update_download(d)
            if d.active:
                self._seen_active.add(d.id)
            elif d.id in self._seen_active:
                self._seen_active.discard(d.id)
                if d.state == "done":
                    self.model_arrived.emit(d.model or "")
                    self.message.emit(f"{d.repo} ({d.variant}) is downloaded and ready to use.", False)
                elif d.state == "failed":
                    self.message.emit(f"The download of {d.repo} failed: {d.error}", True)
        self.empty.setVisible(not self.rows)
        if not any(d.active for d in downloads):
            self.timer.stop()
        elif not self.timer.isActive():
            self.timer.start()

    def _act(self, download_id: str, action: str) -> None:
        call = self.api.download_action(download_id, action)
        call.succeeded.connect(lambda _d: self.refresh())
        call.failed.connect(lambda e: self.message.emit(e.message, True))
