"""Composer: where a message is written. Enter sends, Shift+Enter starts a new line; while the
chat answers, the send button becomes Stop."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QMimeData, QObject, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.icons import icon
from app.theme import ThemeColors

MAX_LINES = 8


PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")


class MessageInput(QPlainTextEdit):
    """The text box of the composer, whose placeholder says whether the engine is ready. Pictures pasted or
    dropped on it are handed on (``pictures_received``), not inserted as text."""

    pictures_received = Signal(object)  # QMimeData with an image or picture files

    @staticmethod
    def has_pictures(source: QMimeData) -> bool:
        if source.hasImage():
            return True
        return any(u.isLocalFile() and u.toLocalFile().lower().endswith(PICTURE_SUFFIXES) for u in source.urls())

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 - Qt override
        return self.has_pictures(source) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt override
        if self.has_pictures(source):
            self.pictures_received.emit(source)
        else:
            super().insertFromMimeData(source)

    def setPlaceholderText(self, text: str) -> None:  # noqa: N802 - Qt override
        if text == self.placeholderText():
            return
        super().setPlaceholderText(text)
        # QPlainTextEdit repaints its placeholder only when it appears or disappears (the text
        # turning empty or not), not when the placeholder itself changes while shown: the old
        # words stay on the screen until something else repaints the box (a resize, a click).
        self.viewport().update()


class Composer(QWidget):
    send_requested = Signal(str)
    stop_requested = Signal()

    def __init__(self, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.colors = colors
        self.answering = False
        self.stop_keys = ""  # the keys that stop an answer too, for the Stop button's tooltip
        self.engine_ready = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 4, 24, 12)
        outer.setSpacing(4)
        self.frame = QFrame()
        self.frame.setObjectName("Composer")
        self.frame.setMaximumWidth(860)  # as wide as the chat's column, and narrower with it
        frame_column = QVBoxLayout(self.frame)
        frame_column.setContentsMargins(10, 8, 8, 8)
        frame_column.setSpacing(4)
        self.attachments = QHBoxLayout()  # features' attachment rows (images...), above the text box
        self.attachments.setContentsMargins(0, 0, 0, 0)
        frame_column.addLayout(self.attachments)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        frame_column.addLayout(row)
        self.input = MessageInput()
        self.input.setObjectName("composerInput")
        self.input.setPlaceholderText("Send a message…")
        self.input.setTabChangesFocus(True)
        self.input.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.input.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.input.installEventFilter(self)
        self.input.textChanged.connect(self._resize_input)
        self.input.textChanged.connect(self._update_button)
        row.addWidget(self.input, 1)
        self.button = QPushButton()
        self.button.setObjectName("sendButton")
        self.button.setProperty("primary", True)
        self.button.setFixedSize(QSize(38, 38))
        self.button.setIconSize(QSize(18, 18))
        self.button.clicked.connect(self._clicked)
        row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        centered = QHBoxLayout()  # as the chat view centres its column
        centered.addStretch(0)
        centered.addWidget(self.frame, 1)
        centered.addStretch(0)
        outer.addLayout(centered)
        self.hint = QLabel("Enter to send · Shift+Enter for a new line")
        self.hint.setObjectName("Muted")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setWordWrap(True)
        outer.addWidget(self.hint)
        self._resize_input()
        self._update_button()

    def add_attachment(self, widget: QWidget) -> None:
        """A feature's widget above the text box (it shows and hides itself)."""
        self.attachments.addWidget(widget)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if watched is self.input and event.type() == QEvent.Type.KeyPress:
            key: QKeyEvent = event
            if key.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not key.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self._clicked() if not self.answering else None
                return True
        return super().eventFilter(watched, event)

    def _resize_input(self) -> None:
        wanted = max(1, self.input.document().size().toSize().height() or 1)
        lines = min(MAX_LINES, wanted)
        height = self.input.fontMetrics().lineSpacing() * lines + 20
        self.input.setFixedHeight(height)
        policy = Qt.ScrollBarPolicy.ScrollBarAsNeeded if wanted > MAX_LINES else Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        self.input.setVerticalScrollBarPolicy(policy)

    def set_answering(self, answering: bool) -> None:
        self.answering = answering
        self._update_button()

    def set_engine_ready(self, ready: bool, message: str = "") -> None:
        self.engine_ready = ready
        self.input.setPlaceholderText("Send a message…" if ready else (message or "Starting the engine…"))
        self._update_button()

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self._update_button()

    def _update_button(self) -> None:
        if self.answering:
            self.button.setIcon(icon("stop", self.colors.accent_text))
            self.button.setToolTip(f"Stop the answer ({self.stop_keys})" if self.stop_keys else "Stop the answer")
            self.button.setEnabled(True)
        else:
            self.button.setIcon(icon("send", self.colors.accent_text))
            self.button.setToolTip("Send" if self.engine_ready else "The engine is starting…")
            self.button.setEnabled(self.engine_ready and bool(self.input.toPlainText().strip()))

    def _clicked(self) -> None:
        if self.answering:
            self.stop_requested.emit()
            return
        text = self.input.toPlainText()
        if not text.strip() or not self.engine_ready:
            return
        self.input.clear()
        self.send_requested.emit(text)
