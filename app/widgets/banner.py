"""Banner: a strip across the top of the window for what a person should know now
(the engine restarting, a failed start) with an optional action."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from app.icons import icon
from app.theme import ThemeColors


class Banner(QFrame):
    def __init__(self, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Banner")
        self.colors = colors
        row = QHBoxLayout(self)
        row.setContentsMargins(16, 8, 10, 8)
        self.symbol = QLabel()
        row.addWidget(self.symbol)
        self.label = QLabel()
        self.label.setWordWrap(True)
        row.addWidget(self.label, 1)
        self.action = QPushButton()
        self.action.hide()
        row.addWidget(self.action)
        self.close_button = QToolButton()
        self.close_button.setIcon(icon("close", colors.warning_text))
        self.close_button.setIconSize(QSize(14, 14))
        self.close_button.clicked.connect(self.hide)
        row.addWidget(self.close_button)
        self._callback: Callable[[], None] | None = None
        self.action.clicked.connect(self._act)
        self.hide()

    @property
    def text(self) -> str:
        return self.label.text()

    def show_message(self, text: str, *, level: str = "warning", action: str = "", on_action: Callable[[], None] | None = None) -> None:
        self.setProperty("level", level)
        self.symbol.setPixmap(icon("warning", self.colors.warning_text).pixmap(QSize(16, 16)))
        self.label.setText(text)
        self.action.setText(action)
        self.action.setVisible(bool(action))
        self._callback = on_action
        self.style().unpolish(self)
        self.style().polish(self)
        self.show()

    def _act(self) -> None:
        if self._callback is not None:
            self._callback()
