"""LocalModelsTable: the models on this computer, with size, format, quantization and backend; another
app's model (Ollama's, LM Studio's...) has its origin as a small badge beside its name (OriginBadgeDelegate)."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QRect, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem

from app.net.types import ModelInfo
from app.units import human_bytes, human_count

COLUMNS = ("Name", "Format", "Quantization", "Size", "Parameters", "Backend", "State")
STATES = {"loaded": "Loaded", "loading": "Loading…", "not-loaded": "On disk"}

_Index = QModelIndex | QPersistentModelIndex
BADGE_ROLE = Qt.ItemDataRole.UserRole + 1  # the origin badge's text ("Ollama"), on the name column


class LocalModelsTable(QAbstractTableModel):
    """Rows are :class:`ModelInfo`; the backend column comes from the hardware report (which
    backend each format uses here) or from the worker's stats for loaded models."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._models: list[ModelInfo] = []
        self._backend_by_format: dict[str, str] = {}
        self._backend_by_model: dict[str, str] = {}

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._models)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def backend(self, model: ModelInfo) -> str:
        return self._backend_by_model.get(model.name) or self._backend_by_format.get(model.format, "—")

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        m = self._models[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (
                m.name,
                m.format.upper() or "—",
                m.quantization or "—",
                human_bytes(m.size_bytes),
                human_count(m.parameters),
                self.backend(m),
                STATES.get(m.state, m.state),
            )[col]
        if role == BADGE_ROLE and col == 0:  # where it comes from, and what it takes in besides text
            marks = [m.origin_label, *(c for c in m.capabilities if c in ("vision", "audio"))]
            return " · ".join(x for x in marks if x) or None
        if role == Qt.ItemDataRole.ToolTipRole:
            if m.origin == "folder":
                return f"{m.path}\nIn one of your model folders: read in place; its files stay there."
            if m.origin_label:
                return f"{m.path}\nFrom {m.origin_label}: read in place; its files stay that app's."
            return m.path
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (3, 4):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.UserRole:
            return m
        return None

    def set_models(self, models: list[ModelInfo]) -> None:
        self.beginResetModel()
        self._models = list(models)
        self.endResetModel()

    def set_backends(self, by_format: dict[str, str] | None = None, by_model: dict[str, str] | None = None) -> None:
        if by_format is not None:
            self._backend_by_format = dict(by_format)
        if by_model is not None:
            self._backend_by_model = dict(by_model)
        if self._models:
            self.dataChanged.emit(self.index(0, 5), self.index(len(self._models) - 1, 5))

    def model_at(self, row: int) -> ModelInfo:
        return self._models[row]

    def names(self) -> list[str]:
        return [m.name for m in self._models]


class OriginBadgeDelegate(QStyledItemDelegate):
    """Paints the name, then the origin (:data:`BADGE_ROLE`) as a small rounded label after it."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: _Index) -> None:
        badge = index.data(BADGE_ROLE)
        if not badge:
            super().paint(painter, option, index)
            return
        metrics = option.fontMetrics
        width = metrics.horizontalAdvance(badge) + 12
        rect = QRect(option.rect)
        text_part = QStyleOptionViewItem(option)
        text_part.rect = rect.adjusted(0, 0, -(width + 8), 0)
        super().paint(painter, text_part, index)
        pill = QRect(rect.right() - width - 4, rect.center().y() - metrics.height() // 2 - 1, width, metrics.height() + 2)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        color = option.palette.highlight().color()
        painter.setPen(color)
        fill = color.lighter(170)
        fill.setAlpha(90)
        painter.setBrush(fill)
        painter.drawRoundedRect(pill, 6, 6)
        painter.setPen(option.palette.text().color())
        painter.drawText(pill, int(Qt.AlignmentFlag.AlignCenter), badge)
        painter.restore()
