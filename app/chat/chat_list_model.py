"""ChatListModel: the sidebar's list of chats (titles editable in place to rename)."""

from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, Signal

from app.store.records import ChatRecord

ChatRole = Qt.ItemDataRole.UserRole + 1
AnsweringRole = Qt.ItemDataRole.UserRole + 2

_Index = QModelIndex | QPersistentModelIndex


class ChatListModel(QAbstractListModel):
    rename_requested = Signal(int, str)  # chat id, new title

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._chats: list[ChatRecord] = []
        self._answering: set[int] = set()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._chats)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        chat = self._chats[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return ("● " if chat.id in self._answering else "") + chat.title
        if role == Qt.ItemDataRole.EditRole:
            return chat.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{chat.title}\n{chat.settings.model}"
        if role == ChatRole:
            return chat
        if role == AnsweringRole:
            return chat.id in self._answering
        return None

    def flags(self, index: _Index) -> Qt.ItemFlag:
        base = super().flags(index)
        return base | Qt.ItemFlag.ItemIsEditable if index.isValid() else base

    def setData(self, index: _Index, value, role: int = Qt.ItemDataRole.EditRole) -> bool:  # noqa: N802
        if role != Qt.ItemDataRole.EditRole or not index.isValid() or not str(value).strip():
            return False
        self.rename_requested.emit(self._chats[index.row()].id, str(value))
        return True

    def set_chats(self, chats: list[ChatRecord]) -> None:
        self.beginResetModel()
        self._chats = list(chats)
        self.endResetModel()

    def chat(self, row: int) -> ChatRecord:
        return self._chats[row]

    def row_of(self, chat_id: int) -> int:
        return next((i for i, c in enumerate(self._chats) if c.id == chat_id), -1)

    def set_answering(self, chat_id: int, answering: bool) -> None:
        (self._answering.add if answering else self._answering.discard)(chat_id)
        row = self.row_of(chat_id)
        if row >= 0:
            self.dataChanged.emit(self.index(row), self.index(row), [Qt.ItemDataRole.DisplayRole, AnsweringRole])
