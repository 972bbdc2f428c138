"""ExampleBox: a read-only box of example code that a page scrolls past.

A text box takes the mouse wheel for itself, so a page of them stops scrolling wherever the pointer
rests on one. This one gives the wheel to the page around it unless it has the focus (a click in it, or Tab).
"""

from __future__ import annotations

from PySide6.QtCore import QPointF
from PySide6.QtGui import QFont, QWheelEvent
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QPlainTextEdit, QWidget


class ExampleBox(QPlainTextEdit):
    def __init__(self, height: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(QFont("DejaVu Sans Mono", 9))
        self.setFixedHeight(height)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 - Qt override
        page = self._page()
        if self.hasFocus() or page is None:
            super().wheelEvent(event)
            return
        # Handed on, not ignored: Qt passes an ignored wheel to the parents only when it came from the system.
        viewport = page.viewport()
        at = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
        handed = QWheelEvent(
            at, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(), event.modifiers(),
            event.phase(), event.inverted(), event.source(),
        )  # fmt: skip
        QApplication.sendEvent(viewport, handed)
        event.accept()

    def _page(self) -> QAbstractScrollArea | None:
        """The scrolling page this box sits on (the nearest scroll area above it)."""
        parent = self.parentWidget()
        while parent is not None and not isinstance(parent, QAbstractScrollArea):
            parent = parent.parentWidget()
        return parent


__all__ = ["ExampleBox"]
