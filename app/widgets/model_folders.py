"""The "Model folders" section of the Models page: where Hearth finds models, and where downloads go.

A folder on a drive taken out is shown as offline (greyed, "offline"), never as an error; its models come back
when it does. Everything goes through the worker's ``/api/folders``, as `hearth folders` does.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.net.api import HearthApi
from app.net.types import ApiError
from engine.server.api_models import ModelFolder


def folder_text(folder: ModelFolder) -> str:
    """One line of the list: the path, then what it holds, where downloads go, or that it is offline."""
    if not folder.online:
        return f"{folder.path}  —  offline (its models return when it is back)"
    count = f"{folder.models} model{'s' if folder.models != 1 else ''}"
    return f"{folder.path}  —  {count}" + ("  ·  downloads go here" if folder.downloads else "")


class ModelFoldersSection(QWidget):
    """The folder list with Add… and Remove. ``changed`` fires after a folder is added or removed (the
    models listed change with it); ``message`` carries a sentence for the page."""

    changed = Signal()
    message = Signal(str, bool)  # text, is an error

    def __init__(self, api: HearthApi, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self.folders: list[ModelFolder] = []
        self._asked = 0  # calls made; an answer older than the one shown is not shown over it
        self._shown = 0
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 8, 0, 0)
        header = QHBoxLayout()
        title = QLabel("Model folders")
        title.setObjectName("SectionTitle")
        header.addWidget(title)
        header.addStretch()
        self.add_button = QPushButton("Add folder…")
        self.remove_button = QPushButton("Remove")
        self.add_button.clicked.connect(self.choose_folder)
        self.remove_button.clicked.connect(self.remove_selected)
        header.addWidget(self.add_button)
        header.addWidget(self.remove_button)
        column.addLayout(header)
        self.list = QListWidget()
        self.list.setObjectName("modelFolders")
        self.list.setMaximumHeight(96)
        column.addWidget(self.list)

    def _ask(self) -> int:
        self._asked += 1
        return self._asked

    def refresh(self) -> None:
        asked = self._ask()
        call = self.api.folders()
        call.succeeded.connect(lambda folders: self.set_folders(folders, asked))
        call.failed.connect(self._failed)

    def set_folders(self, folders: list[ModelFolder], asked: int | None = None) -> None:
        """Show ``folders``; ``asked``: the number of the call that answered them (a listing asked before an
        add that has already answered is older than what the add showed, and is dropped)."""
        if asked is not None:
            if asked < self._shown:
                return
            self._shown = asked
        self.folders = list(folders)
        self.list.clear()
        for folder in self.folders:
            item = QListWidgetItem(folder_text(folder))
            item.setData(Qt.ItemDataRole.UserRole, folder.path)
            if not folder.online:
                item.setForeground(self.palette().placeholderText())
            self.list.addItem(item)
        self.remove_button.setEnabled(len(self.folders) > 1)

    def choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if path:
            self.add(path)

    def add(self, path: str) -> None:
        asked = self._ask()
        call = self.api.add_folder(path)
        call.succeeded.connect(lambda folders: self._done(folders, asked, f"Added {path}; its models are listed now."))
        call.failed.connect(self._failed)

    def remove_selected(self) -> None:
        item = self.list.currentItem()
        if item is None:
            self.message.emit("Select a folder in the list first.", False)
            return
        self.remove(item.data(Qt.ItemDataRole.UserRole))

    def remove(self, path: str) -> None:
        asked = self._ask()
        call = self.api.remove_folder(path)
        call.succeeded.connect(
            lambda folders: self._done(folders, asked, f"Removed {path}; its files stay where they are.")
        )
        call.failed.connect(self._failed)

    def _done(self, folders: list[ModelFolder], asked: int, text: str) -> None:
        self.set_folders(folders, asked)
        self.message.emit(text, False)
        self.changed.emit()

    def _failed(self, error: ApiError) -> None:
        self.message.emit(error.message, True)
