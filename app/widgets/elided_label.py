"""ElidedLabel: one line of text that ends in "…" when it does not fit; ElidedCombo: a combo box whose chosen
entry does the same."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QSizePolicy,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QWidget,
)


class ElidedLabel(QLabel):
    """Elides at paint time, with the font the style sheet finally gave it."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        super().setText(text)
        self.setToolTip(text)

    def full_text(self) -> str:
        return self.text()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(40, super().minimumSizeHint().height())

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(rect, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft), shown)
        painter.end()


class ElidedCombo(QComboBox):
    """A combo box that asks for at least ``wanted`` pixels (more for a long entry) and can shrink to
    ``narrowest``; its chosen entry then ends in "…" (the list that drops down shows entries whole)."""

    def __init__(self, wanted: int, narrowest: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.wanted = wanted
        self.narrowest = narrowest

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        hint = super().sizeHint()
        return QSize(max(self.wanted, hint.width()), hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(self.narrowest, super().minimumSizeHint().height())

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        field = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                            QStyle.SubControl.SC_ComboBoxEditField, self)  # fmt: skip
        option.currentText = self.fontMetrics().elidedText(option.currentText, Qt.TextElideMode.ElideRight, field.width())
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)
