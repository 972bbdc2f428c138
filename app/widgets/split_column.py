"""SplitColumn: the second model's column of a chat split side by side: which model, and its answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.store.images import ImageRef
from app.store.records import AnswerSteps
from app.theme import ThemeColors
from app.widgets.chat_view import ChatView
from app.widgets.elided_label import ElidedCombo


class SplitColumn(QFrame):
    """A model picker over a :class:`ChatView` of the companion chat."""

    model_chosen = Signal(str)

    def __init__(self, colors: ThemeColors, steps_source: Callable[[int], AnswerSteps | None], parent: QWidget | None = None,
                 *, picture_path: Callable[[ImageRef], Path] | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self.setObjectName("SplitColumn")
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        row = QHBoxLayout()
        row.setContentsMargins(20, 4, 12, 4)
        label = QLabel("Side by side with")
        label.setObjectName("Muted")
        row.addWidget(label)
        self.model_combo = ElidedCombo(200, 90)
        self.model_combo.setObjectName("splitModelCombo")
        self.model_combo.setToolTip("The second model: each message goes to both")
        self.model_combo.activated.connect(lambda i: self.model_chosen.emit(self.model_combo.itemData(i) or ""))
        row.addWidget(self.model_combo, 1)
        column.addLayout(row)
        self.view = ChatView(colors, steps_source=steps_source, picture_path=picture_path)
        column.addWidget(self.view, 1)

    def fill_models(self, choices: list[tuple[str, str]], selected: str) -> None:
        """``choices``: (label, model id) pairs."""
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        for label, name in choices:
            self.model_combo.addItem(label, name)
        if self.model_combo.findData(selected) < 0:
            self.model_combo.addItem(f"{selected} (not available)", selected)
        self.model_combo.setCurrentIndex(self.model_combo.findData(selected))
        self.model_combo.setItemData(self.model_combo.currentIndex(), selected, Qt.ItemDataRole.ToolTipRole)
        self.model_combo.blockSignals(False)
