"""ChatSidebar: new chat, search, and the list of chats with rename, export and delete."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.chat_list_model import ChatListModel
from app.icons import icon
from app.theme import ThemeColors

SEARCH_DELAY_MS = 150


class ChatSidebar(QFrame):
    chat_selected = Signal(int)
    new_chat_requested = Signal()
    search_changed = Signal(str)
    delete_requested = Signal(int)
    export_requested = Signal(int, str)  # chat id, "md" | "json"

    WIDTH = 260
    NARROWEST = 180

    def __init__(self, model: ChatListModel, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Sidebar")
        # 260 wide where there is room; narrower (titles elide sooner) where side panels need it at the least window size
        self.setMinimumWidth(self.NARROWEST)
        self.setMaximumWidth(self.WIDTH)
        self.model = model
        column = QVBoxLayout(self)
        column.setContentsMargins(12, 14, 12, 12)
        column.setSpacing(10)
        header = QHBoxLayout()
        title = QLabel("Chats")
        title.setObjectName("SectionTitle")
        header.addWidget(title)
        header.addStretch()
        self.new_button = QPushButton(" New")
        self.new_button.setObjectName("newChatButton")
        self.new_button.setProperty("primary", True)
        self.new_button.setIconSize(QSize(14, 14))
        self.new_button.clicked.connect(self.new_chat_requested)
        header.addWidget(self.new_button)
        column.addLayout(header)
        self.search = QLineEdit()
        self.search.setObjectName("chatSearch")
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self.search_icon = self.search.addAction(icon("search", colors.muted), QLineEdit.ActionPosition.LeadingPosition)
        column.addWidget(self.search)
        self.list = QListView()
        self.list.setObjectName("chatList")
        self.list.setModel(model)
        self.list.setEditTriggers(QListView.EditTrigger.DoubleClicked | QListView.EditTrigger.EditKeyPressed)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.setUniformItemSizes(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setVerticalScrollMode(QListView.ScrollMode.ScrollPerPixel)
        self.list.selectionModel().currentChanged.connect(self._current_changed)
        column.addWidget(self.list, 1)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self.search.textChanged.connect(lambda _t: self._search_timer.start())
        self.set_colors(colors)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(self.WIDTH, super().sizeHint().height())

    def set_colors(self, colors: ThemeColors) -> None:
        self.new_button.setIcon(icon("plus", colors.accent_text))
        self.search_icon.setIcon(icon("search", colors.muted))

    def select_chat(self, chat_id: int) -> None:
        row = self.model.row_of(chat_id)
        if row >= 0:
            self.list.selectionModel().blockSignals(True)
            self.list.setCurrentIndex(self.model.index(row))
            self.list.selectionModel().blockSignals(False)

    def rename(self, chat_id: int) -> None:
        """Start editing the chat's title in place."""
        row = self.model.row_of(chat_id)
        if row >= 0:
            self.list.edit(self.model.index(row))

    def _current_changed(self, current, _previous) -> None:
        if current.isValid():
            self.chat_selected.emit(self.model.chat(current.row()).id)

    def _menu(self, pos: QPoint) -> None:
        index = self.list.indexAt(pos)
        if not index.isValid():
            return
        chat_id = self.model.chat(index.row()).id
        menu = QMenu(self)
        menu.addAction("Rename", lambda: self.rename(chat_id))
        menu.addAction("Export as Markdown…", lambda: self.export_requested.emit(chat_id, "md"))
        menu.addAction("Export as JSON…", lambda: self.export_requested.emit(chat_id, "json"))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.delete_requested.emit(chat_id))
        menu.popup(self.list.viewport().mapToGlobal(pos))
