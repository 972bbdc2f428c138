"""RemotePanel: OpenAI-compatible servers elsewhere (a vLLM or SGLang cluster, another Hearth) whose
models chats can use as ``provider/model``. Add one by name, address and key; remove one."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.net.api import HearthApi
from app.net.local_models import LocalModels
from app.net.remote_types import ProviderInfo
from app.net.types import ApiError
from app.widgets.confirm import confirm
from app.widgets.remote_providers_table import RemoteProvidersTable

INTRO = (
    "Models too big for this computer can run on a serving engine elsewhere — vLLM or SGLang across "
    "several GPUs or machines, or any OpenAI-compatible service. Add it here and its models appear in "
    "every chat's model list as <i>name/model</i>; your messages to them are sent to that server."
)


class RemotePanel(QWidget):
    message = Signal(str, bool)  # text, is an error

    def __init__(self, api: HearthApi, models: LocalModels, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self.models = models
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 12, 0, 0)
        column.setSpacing(10)
        intro = QLabel(INTRO)
        intro.setObjectName("Muted")
        intro.setWordWrap(True)
        column.addWidget(intro)
        form = QGridLayout()
        form.setHorizontalSpacing(8)
        self.name = QLineEdit()
        self.name.setObjectName("remoteName")
        self.name.setPlaceholderText("cluster")
        self.url = QLineEdit()
        self.url.setObjectName("remoteUrl")
        self.url.setPlaceholderText("http://gpu-head:8000/v1")
        self.key = QLineEdit()
        self.key.setObjectName("remoteKey")
        self.key.setPlaceholderText("API key, if it needs one")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.add_button = QPushButton("Add provider")
        self.add_button.setObjectName("addRemoteButton")
        for col, (label, field) in enumerate((("Name", self.name), ("Address", self.url), ("API key", self.key))):
            form.addWidget(QLabel(label), 0, col)
            form.addWidget(field, 1, col)
        form.addWidget(self.add_button, 1, 3)
        form.setColumnStretch(1, 2)
        form.setColumnStretch(2, 1)
        column.addLayout(form)
        self.table = RemoteProvidersTable(self)
        self.view = QTableView()
        self.view.setObjectName("remoteProviders")
        self.view.setModel(self.table)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.verticalHeader().hide()
        self.view.setShowGrid(False)
        self.view.setAlternatingRowColors(True)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft)
        self.view.verticalHeader().setDefaultSectionSize(34)
        column.addWidget(self.view, 1)
        buttons = QHBoxLayout()
        buttons.addStretch()
        self.refresh_button = QPushButton("Check again")
        self.refresh_button.setObjectName("refreshRemotesButton")
        self.remove_button = QPushButton("Remove…")
        self.remove_button.setObjectName("removeRemoteButton")
        self.remove_button.setProperty("danger", True)
        buttons.addWidget(self.refresh_button)
        buttons.addWidget(self.remove_button)
        column.addLayout(buttons)
        self.add_button.clicked.connect(self.add)
        self.key.returnPressed.connect(self.add)
        self.refresh_button.clicked.connect(lambda: self.models.refresh_remotes(fresh=True))
        self.remove_button.clicked.connect(self.confirm_remove)
        self.models.remote_changed.connect(self.table.set_providers)

    # -- adding -------------------------------------------------------------------------------
    def add(self) -> None:
        name, url = self.name.text().strip(), self.url.text().strip()
        if not name or not url:
            self.message.emit("Give the provider a name and its address, e.g. http://gpu-head:8000/v1.", True)
            return
        self.add_button.setEnabled(False)
        self.message.emit(f"Connecting to {url}…", False)
        call = self.api.add_remote(name, url, self.key.text())
        call.succeeded.connect(self._added)
        call.failed.connect(self._add_failed)

    def _added(self, provider: ProviderInfo) -> None:
        self.add_button.setEnabled(True)
        for field in (self.name, self.url, self.key):
            field.clear()
        if provider.state == "ok":
            count = len(provider.models)
            self.message.emit(f"Added {provider.name}: {count} model{'s' if count != 1 else ''} ready to chat with.", False)
        else:
            self.message.emit(f"Added {provider.name}, but: {provider.message}", True)
        self.models.refresh_remotes()

    def _add_failed(self, error: ApiError) -> None:
        self.add_button.setEnabled(True)
        self.message.emit(error.message, True)

    # -- removing -----------------------------------------------------------------------------
    def selected(self) -> ProviderInfo | None:
        rows = self.view.selectionModel().selectedRows() if self.view.selectionModel() else []
        return self.table.provider_at(rows[0].row()) if rows else None

    def confirm_remove(self) -> None:
        provider = self.selected()
        if provider is None:
            self.message.emit("Select a provider in the list first.", False)
            return
        confirm(
            self,
            "Remove provider",
            f"Remove {provider.name} ({provider.url}) and its key? Chats that use its models keep their messages.",
            "Remove",
            lambda: self.remove(provider),
        )

    def remove(self, provider: ProviderInfo) -> None:
        call = self.api.remove_remote(provider.name)
        call.succeeded.connect(lambda name: (self.message.emit(f"{name} is removed.", False), self.models.refresh_remotes()))
        call.failed.connect(lambda e: self.message.emit(e.message, True))
