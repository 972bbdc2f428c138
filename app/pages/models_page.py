"""The Models page: models on this computer, the Hub with the advisor's labels, downloads, and
remote providers (serving engines elsewhere whose models chats can use).

A local GGUF comes in through the Import button or by dropping the file anywhere on the page.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.icons import icon
from app.net.api import HearthApi
from app.net.catalog_types import HardwareReport
from app.net.local_models import LocalModels
from app.net.types import ApiError, ModelInfo, StatsSnapshot
from app.pages.downloads_panel import DownloadsPanel
from app.pages.hub_panel import HubPanel
from app.pages.remote_panel import RemotePanel
from app.store.settings_store import SettingsStore
from app.theme import ThemeColors
from app.widgets.confirm import confirm
from app.widgets.local_models_table import LocalModelsTable, OriginBadgeDelegate
from app.widgets.model_folders import ModelFoldersSection
from app.widgets.model_settings_dialog import ModelSettingsDialog


class ModelsPage(QWidget):
    status = Signal(str)  # a sentence for the page's status line

    def __init__(
        self, api: HearthApi, models: LocalModels, colors: ThemeColors, parent: QWidget | None = None, *,
        settings: SettingsStore | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("Page")
        self.setAcceptDrops(True)
        self.api = api
        self.models = models
        self.colors = colors
        column = QVBoxLayout(self)
        column.setContentsMargins(28, 22, 28, 18)
        column.setSpacing(12)
        header = QHBoxLayout()
        title = QLabel("Models")
        title.setObjectName("PageTitle")
        header.addWidget(title)
        header.addStretch()
        self.import_button = QPushButton(" Import GGUF…")
        self.import_button.setObjectName("importButton")
        self.import_button.setIconSize(QSize(16, 16))
        self.import_button.clicked.connect(self.choose_import)
        header.addWidget(self.import_button)
        column.addLayout(header)
        self.message = QLabel()
        self.message.setObjectName("Muted")
        self.message.setWordWrap(True)
        self.message.hide()
        column.addWidget(self.message)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self._local_tab(), "On this computer")
        self.hub = HubPanel(api, colors, settings=settings)
        self.tabs.addTab(self.hub, "Discover")
        self.downloads = DownloadsPanel(api, colors)
        self.tabs.addTab(self.downloads, "Downloads")
        self.remote = RemotePanel(api, models)
        self.tabs.addTab(self.remote, "Remote providers")
        column.addWidget(self.tabs, 1)
        self.hub.download_started.connect(lambda _d: (self.downloads.refresh(), self.tabs.setCurrentWidget(self.downloads)))
        self.hub.message.connect(self.show_message)
        self.downloads.model_arrived.connect(lambda _name: self.models.refresh())
        self.downloads.message.connect(self.show_message)
        self.remote.message.connect(self.show_message)
        self.models.changed.connect(self.table.set_models)
        self.models.failed.connect(lambda e: self.show_message(e.message, error=True))
        self.set_colors(colors)

    def _local_tab(self) -> QWidget:
        tab = QWidget()
        column = QVBoxLayout(tab)
        column.setContentsMargins(0, 12, 0, 0)
        self.table = LocalModelsTable(self)
        self.view = QTableView()
        self.view.setObjectName("localModels")
        self.view.setModel(self.table)
        self.view.setItemDelegateForColumn(0, OriginBadgeDelegate(self.view))
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.verticalHeader().hide()
        self.view.setShowGrid(False)
        self.view.setAlternatingRowColors(True)
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.view.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.view.horizontalHeader().setDefaultAlignment(Qt.AlignmentFlag.AlignLeft)
        self.view.verticalHeader().setDefaultSectionSize(34)
        column.addWidget(self.view, 1)
        buttons = QHBoxLayout()
        hint = QLabel("Drop a .gguf file here to add it.")
        hint.setObjectName("Muted")
        buttons.addWidget(hint)
        buttons.addStretch()
        self.load_button = QPushButton("Load")
        self.settings_button = QPushButton("Settings…")
        self.settings_button.setObjectName("modelSettingsButton")
        self.unload_button = QPushButton("Unload")
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setProperty("danger", True)
        self.delete_button.setObjectName("deleteModelButton")
        for b in (self.load_button, self.settings_button, self.unload_button, self.delete_button):
            buttons.addWidget(b)
        self.load_button.clicked.connect(lambda: self._on_selected(self.load))
        self.settings_button.clicked.connect(lambda: self._on_selected(self.open_settings))
        self.unload_button.clicked.connect(lambda: self._on_selected(self.unload))
        self.delete_button.clicked.connect(lambda: self._on_selected(self.confirm_delete))
        column.addLayout(buttons)
        self.folders = ModelFoldersSection(self.api)
        self.folders.changed.connect(self.models.refresh)
        self.folders.message.connect(self.show_message)
        column.addWidget(self.folders)
        return tab

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.import_button.setIcon(icon("import", colors.text))
        self.hub.set_colors(colors)
        self.downloads.set_colors(colors)

    def show_message(self, text: str, error: bool = False) -> None:
        color = self.colors.error_text if error else self.colors.muted
        self.message.setText(f'<span style="color:{color};">{text}</span>' if text else "")
        self.message.setVisible(bool(text))

    # -- engine facts -------------------------------------------------------------------------
    def engine_ready(self) -> None:
        self.models.refresh()
        self.folders.refresh()
        self.downloads.refresh()
        self.hub.engine_ready()
        call = self.api.hardware()
        call.succeeded.connect(self._hardware)
        stats = self.api.stats()
        stats.succeeded.connect(self._stats)

    def _hardware(self, facts: HardwareReport) -> None:
        self.table.set_backends(by_format={b.format: b.backend for b in facts.backends})

    def _stats(self, stats: StatsSnapshot) -> None:
        self.table.set_backends(by_model={m.name: m.backend for m in stats.models if m.backend})

    # -- actions on the selected model --------------------------------------------------------
    def selected(self) -> ModelInfo | None:
        rows = self.view.selectionModel().selectedRows() if self.view.selectionModel() else []
        return self.table.model_at(rows[0].row()) if rows else None

    def _on_selected(self, action) -> None:
        model = self.selected()
        if model is None:
            self.show_message("Select a model in the list first.")
            return
        action(model)

    def load(self, model: ModelInfo) -> None:
        self.show_message(f"Loading {model.name}…")
        call = self.api.load_model(model.name)
        call.succeeded.connect(lambda r: (self.show_message(f"{model.name} is loaded ({r.backend}, {r.n_ctx:,} tokens of context)."), self.engine_ready()))
        call.failed.connect(lambda e: self.show_message(e.message, error=True))

    def open_settings(self, model: ModelInfo) -> ModelSettingsDialog:
        """The load settings of ``model``, with its fit plan; saving them is said on the page."""
        dialog = ModelSettingsDialog(self.api, model.name, self)
        dialog.saved.connect(lambda a: self.show_message(f"Saved; every load of {a.name} takes these settings from now on."))
        dialog.open()
        return dialog

    def unload(self, model: ModelInfo) -> None:
        call = self.api.unload_model(model.name)
        call.succeeded.connect(lambda _r: (self.show_message(f"{model.name} is unloaded; its memory is free."), self.models.refresh()))
        call.failed.connect(lambda e: self.show_message(e.message, error=True))

    def confirm_delete(self, model: ModelInfo) -> None:
        if model.origin:
            confirm(
                self,
                "Remove model",
                f"Remove {model.name} from Hearth? Its files belong to {model.origin_label} and stay where they are.",
                "Remove",
                lambda: self.delete(model),
            )
            return
        confirm(
            self,
            "Delete model",
            f"Delete {model.name}? Its files ({model.path}) are removed from this computer.",
            "Delete",
            lambda: self.delete(model),
            icon=QMessageBox.Icon.Warning,
        )

    def delete(self, model: ModelInfo) -> None:
        call = self.api.delete_model(model.name)
        done = f"{{}} is removed from Hearth; {model.origin_label} keeps its files." if model.origin else "{} is deleted."
        call.succeeded.connect(lambda name: (self.show_message(done.format(name)), self.models.refresh()))
        call.failed.connect(lambda e: self.show_message(e.message, error=True))

    # -- importing ----------------------------------------------------------------------------
    def choose_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", "", "GGUF models (*.gguf)")
        if path:
            self.import_file(path)

    def import_file(self, path: str) -> None:
        self.show_message(f"Importing {path}…")
        call = self.api.import_model(path)
        call.succeeded.connect(lambda m: (self.show_message(f"{m.name} is ready to use."), self.models.refresh()))
        call.failed.connect(self._import_failed)

    def _import_failed(self, error: ApiError) -> None:
        self.show_message(error.message, error=True)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if any(u.toLocalFile().lower().endswith(".gguf") for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        for url in event.mimeData().urls():
            if url.toLocalFile().lower().endswith(".gguf"):
                self.import_file(url.toLocalFile())
        event.acceptProposedAction()
