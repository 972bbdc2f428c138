"""RemoteProvidersTable: the remote providers, with their address, key, state and models."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

from app.net.remote_types import ProviderInfo

COLUMNS = ("Name", "Address", "Key", "State", "Models")
STATES = {
    "ok": "Connected",
    "refused": "Key refused",
    "unreachable": "Cannot be reached",
    "timeout": "Not answering",
    "error": "Error",
}
KEYS = {"keyring": "In the OS keyring", "file": "In a private file", None: "None"}

_Index = QModelIndex | QPersistentModelIndex


class RemoteProvidersTable(QAbstractTableModel):
    """Rows are :class:`ProviderInfo`; a provider's error is its State cell's tooltip."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._providers: list[ProviderInfo] = []

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._providers)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        p = self._providers[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            models = ", ".join(m.remote_id for m in p.models) if p.models else "—"
            return (p.name, p.url, KEYS.get(p.key, p.key or "None"), STATES.get(p.state, p.state), models)[col]
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == 3 and p.message:
                return p.message
            if col == 4 and p.models:
                return "\n".join(m.id for m in p.models)
        if role == Qt.ItemDataRole.UserRole:
            return p
        return None

    def set_providers(self, providers: list[ProviderInfo]) -> None:
        self.beginResetModel()
        self._providers = list(providers)
        self.endResetModel()

    def provider_at(self, row: int) -> ProviderInfo:
        return self._providers[row]

    def names(self) -> list[str]:
        return [p.name for p in self._providers]

    def get(self, name: str) -> ProviderInfo | None:
        return next((p for p in self._providers if p.name == name), None)
