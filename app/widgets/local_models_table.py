"""LocalModelsTable: the models on this computer, with size, format, quantization and backend."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

from app.net.types import ModelInfo
from app.units import human_bytes, human_count

COLUMNS = ("Name", "Format", "Quantization", "Size", "Parameters", "Backend", "State")
STATES = {"loaded": "Loaded", "loading": "Loading…", "not-loaded": "On disk"}

_Index = QModelIndex | QPersistentModelIndex


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
        if role == Qt.ItemDataRole.ToolTipRole:
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
