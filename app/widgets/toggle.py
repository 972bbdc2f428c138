"""ToggleSwitch: a checkbox drawn as an on/off switch (track and knob), for settings."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QCheckBox, QWidget

from app.theme import ThemeColors

TRACK_W, TRACK_H, GAP = 36, 20, 10


class ToggleSwitch(QCheckBox):
    def __init__(self, text: str, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.colors = colors
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        width = TRACK_W + GAP + self.fontMetrics().horizontalAdvance(self.text()) + 4
        return QSize(width, max(TRACK_H + 4, self.fontMetrics().height() + 4))

    def hitButton(self, pos) -> bool:  # noqa: N802 - the whole row toggles
        return self.rect().contains(pos)

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        c = self.colors
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        top = (self.height() - TRACK_H) / 2
        track = QRectF(0, top, TRACK_W, TRACK_H)
        on = self.isChecked()
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(c.accent if on else c.border))
        if not self.isEnabled():
            painter.setOpacity(0.5)
        painter.drawRoundedRect(track, TRACK_H / 2, TRACK_H / 2)
        knob = TRACK_H - 4
        x = track.right() - knob - 2 if on else track.left() + 2
        painter.setBrush(QColor("#ffffff"))
        painter.drawEllipse(QRectF(x, top + 2, knob, knob))
        painter.setOpacity(1.0)
        painter.setPen(QColor(c.text))
        text_rect = self.rect().adjusted(TRACK_W + GAP, 0, 0, 0)
        painter.drawText(text_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, self.text())
        painter.end()
