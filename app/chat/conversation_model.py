"""ConversationModel: a Qt list model over one chat's messages.

A streaming answer changes one row through :meth:`replace` (``dataChanged`` for that row),
never a model reset; the chat view re-renders only that bubble. Until its first token, a streaming
answer may say what it waits for (:meth:`set_waiting`: its model being loaded).
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from app.store.records import MessageRecord

MessageRole = Qt.ItemDataRole.UserRole + 1
StreamingRole = Qt.ItemDataRole.UserRole + 2

_Index = QModelIndex | QPersistentModelIndex


class ConversationModel(QAbstractListModel):
    """Rows are :class:`MessageRecord` objects in chat order."""

    def __init__(
        self, chat_id: int, messages: list[MessageRecord], parent=None, *, branches: dict[int, tuple[int, int]] | None = None
    ) -> None:
        super().__init__(parent)
        self.chat_id = chat_id
        self._messages = list(messages)
        self._streaming: set[int] = set()
        self._waiting: dict[int, str] = {}  # streaming answer id -> what it waits for ("Loading qwen3…")
        self._branches = dict(branches or {})  # message id -> (its position, how many) among its siblings

    # -- Qt model interface -------------------------------------------------------------------
    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802 - Qt's signature
        return 0 if parent.isValid() else len(self._messages)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._messages):
            return None
        message = self._messages[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return message.content
        if role == MessageRole:
            return message
        if role == StreamingRole:
            return message.id in self._streaming
        return None

    def roleNames(self) -> dict[int, bytes]:  # noqa: N802
        return {Qt.ItemDataRole.DisplayRole: b"content", MessageRole: b"message", StreamingRole: b"streaming"}

    # -- reading ------------------------------------------------------------------------------
    def message(self, row: int) -> MessageRecord:
        return self._messages[row]

    def messages(self) -> list[MessageRecord]:
        return list(self._messages)

    def row_of(self, message_id: int) -> int:
        for row, m in enumerate(self._messages):
            if m.id == message_id:
                return row
        return -1

    def is_streaming(self, message_id: int) -> bool:
        return message_id in self._streaming

    def waiting_text(self, message_id: int) -> str:
        """What a streaming answer waits for before its first token ("" when nothing in particular)."""
        return self._waiting.get(message_id, "") if message_id in self._streaming else ""

    def branch_of(self, message_id: int) -> tuple[int, int]:
        """``(2, 3)``: the message is the second of three versions (edits or regenerations)."""
        return self._branches.get(message_id, (1, 1))

    def last_answer(self) -> MessageRecord | None:
        return self._messages[-1] if self._messages and self._messages[-1].is_answer else None

    # -- changing -----------------------------------------------------------------------------
    def append(self, message: MessageRecord, *, streaming: bool = False) -> None:
        row = len(self._messages)
        self.beginInsertRows(QModelIndex(), row, row)
        self._messages.append(message)
        if streaming:
            self._streaming.add(message.id)
        self.endInsertRows()

    def replace(self, message: MessageRecord, *, streaming: bool | None = None) -> None:
        """Put a new version of a message in its row and say that row changed."""
        row = self.row_of(message.id)
        if row < 0:
            return
        self._messages[row] = message
        if streaming is True:
            self._streaming.add(message.id)
        elif streaming is False:
            self._streaming.discard(message.id)
            self._waiting.pop(message.id, None)
        index = self.index(row)
        self.dataChanged.emit(index, index, [Qt.ItemDataRole.DisplayRole, MessageRole, StreamingRole])

    def set_waiting(self, message_id: int, text: str) -> None:
        """Say what the streaming answer ``message_id`` waits for ("" once it no longer waits)."""
        if text == self._waiting.get(message_id, "") or (text and message_id not in self._streaming):
            return
        if text:
            self._waiting[message_id] = text
        else:
            self._waiting.pop(message_id, None)
        row = self.row_of(message_id)
        if row >= 0:
            index = self.index(row)
            self.dataChanged.emit(index, index, [StreamingRole])

    def set_branches(self, branches: dict[int, tuple[int, int]]) -> None:
        """New branch positions (a version was added): the rows whose position changed say so."""
        changed = [r for r, m in enumerate(self._messages) if branches.get(m.id, (1, 1)) != self.branch_of(m.id)]
        self._branches = dict(branches)
        for row in changed:
            index = self.index(row)
            self.dataChanged.emit(index, index, [MessageRole])

    def reset(self, messages: list[MessageRecord], branches: dict[int, tuple[int, int]]) -> None:
        """Show another branch: the rows become ``messages``."""
        self.beginResetModel()
        self._messages = list(messages)
        self._streaming.clear()
        self._waiting.clear()
        self._branches = dict(branches)
        self.endResetModel()

    def remove_from(self, row: int) -> None:
        """Remove ``row`` and every row after it."""
        if not 0 <= row < len(self._messages):
            return
        self.beginRemoveRows(QModelIndex(), row, len(self._messages) - 1)
        for m in self._messages[row:]:
            self._streaming.discard(m.id)
            self._waiting.pop(m.id, None)
        del self._messages[row:]
        self.endRemoveRows()
