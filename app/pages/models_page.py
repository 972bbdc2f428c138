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


def deleted_sentence(answer) -> str:
    """What the page says after a deletion, as the worker answered it: whether the files went or stayed."""
    if answer.files_kept:
        return answer.message or f"{answer.deleted} is removed from Hearth; its files stay where they are."
    return f"{answer.deleted} is deleted."


def unloaded_sentence(name: str, answer) -> str:
    """What the page says after an unload, as the worker answered it: whether the memory was freed, or the weights
    stay loaded for names that answer from them too (a model made from this one, or a copy)."""
    if not answer.unloaded:
        return f"{name} was not loaded."
    if answer.weights_kept_for:
        others = answer.weights_kept_for
        verb = "answers" if len(others) == 1 else "answer"
        return f"{name} is unloaded; its weights stay loaded for {', '.join(others)}, which {verb} from them too."
    return f"{name} is unloaded; its memory is free."


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
        # The status line keeps its line when empty (a message does not push the tabs down); each tab has its
        # own message, shown while that tab is.
        self.message = QLabel()
        self.message.setObjectName("Muted")
        self.message.setWordWrap(True)
        self.message.setText('<span style="color:gray;">Ag</span>')  # a line as the messages are written
        self.message.ensurePolished()
        self.message.setMinimumHeight(self.message.sizeHint().height())
        self.message.setText("")
        self._messages: dict[QWidget, tuple[str, bool]] = {}
        column.addWidget(self.message)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.local_tab = self._local_tab()
        self.tabs.addTab(self.local_tab, "On this computer")
        self.hub = HubPanel(api, colors, settings=settings)
        self.tabs.addTab(self.hub, "Discover")
        self.downloads = DownloadsPanel(api, colors)
        self.tabs.addTab(self.downloads, "Downloads")
        self.remote = RemotePanel(api, models)
        self.tabs.addTab(self.remote, "Remote providers")
        column.addWidget(self.tabs, 1)
        self.hub.download_started.connect(lambda _d: (self.downloads.refresh(), self.tabs.setCurrentWidget(self.downloads)))
        self.hub.message.connect(lambda text, error: self.show_message(text, error, tab=self.hub))
        self.downloads.model_arrived.connect(lambda _name: self.files_changed())
        self.downloads.message.connect(lambda text, error: self.show_message(text, error, tab=self.downloads))
        self.remote.message.connect(lambda text, error: self.show_message(text, error, tab=self.remote))
        self.tabs.currentChanged.connect(lambda _index: self._show_tab_message())
        self.models.changed.connect(self.set_models)
        self.models.failed.connect(lambda e: self.show_message(e.message, error=True, tab=self.local_tab))
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
        self.view.selectionModel().selectionChanged.connect(self._selection_changed)
        self._keeping_selection = False
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
        self._update_buttons()
        self.folders = ModelFoldersSection(self.api)
        self.folders.changed.connect(self.models.refresh)
        self.folders.message.connect(lambda text, error: self.show_message(text, error, tab=tab))
        column.addWidget(self.folders)
        return tab

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.import_button.setIcon(icon("import", colors.text))
        self.hub.set_colors(colors)
        self.downloads.set_colors(colors)

    def show_message(self, text: str, error: bool = False, *, tab: QWidget | None = None) -> None:
        """Say ``text`` on the status line for ``tab`` (by default the tab shown); it shows while that tab does."""
        self._messages[tab or self.tabs.currentWidget()] = (text, error)
        self._show_tab_message()

    def _say(self, text: str, error: bool = False) -> None:
        """A message about the models on this computer (their tab's)."""
        self.show_message(text, error, tab=self.local_tab)

    def _show_tab_message(self) -> None:
        text, error = self._messages.get(self.tabs.currentWidget(), ("", False))
        color = self.colors.error_text if error else self.colors.muted
        self.message.setText(f'<span style="color:{color};">{text}</span>' if text else "")

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
    def set_models(self, models: list[ModelInfo]) -> None:
        """Show ``models``; the model selected stays selected (and its message stays) when it is still there."""
        chosen = self.selected()
        self._keeping_selection = True
        try:
            self.table.set_models(models)
            names = self.table.names()
            if chosen is not None and chosen.name in names:
                self.view.selectRow(names.index(chosen.name))
        finally:
            self._keeping_selection = False
        self._update_buttons()

    def selected(self) -> ModelInfo | None:
        rows = self.view.selectionModel().selectedRows() if self.view.selectionModel() else []
        return self.table.model_at(rows[0].row()) if rows else None

    def _selection_changed(self) -> None:
        if not self._keeping_selection:  # a message about the model selected before is stale now
            self.show_message("", tab=self.local_tab)
        self._update_buttons()

    def _update_buttons(self) -> None:
        """The actions on the selected model: none without one; Load for a model not loaded, Unload for one loaded."""
        model = self.selected()
        self.settings_button.setEnabled(model is not None)
        self.delete_button.setEnabled(model is not None)
        self.load_button.setEnabled(model is not None and model.state == "not-loaded")
        self.unload_button.setEnabled(model is not None and model.state != "not-loaded")
        hint = "" if model is not None else "Select a model in the list first"
        for button in (self.load_button, self.settings_button, self.unload_button, self.delete_button):
            button.setToolTip(hint)

    def _on_selected(self, action) -> None:
        model = self.selected()
        if model is None:
            self._say("Select a model in the list first.")
            return
        action(model)

    def load(self, model: ModelInfo) -> None:
        self._say(f"Loading {model.name}…")
        call = self.api.load_model(model.name)
        call.succeeded.connect(lambda r: (self._say(f"{model.name} is loaded ({r.backend}, {r.n_ctx:,} tokens of context)."), self.engine_ready()))
        call.failed.connect(lambda e: self._say(e.message, error=True))

    def open_settings(self, model: ModelInfo) -> ModelSettingsDialog:
        """The load settings of ``model``, with its fit plan; saving them is said on the page."""
        dialog = ModelSettingsDialog(self.api, model.name, self)
        dialog.saved.connect(lambda a: self._say(f"Saved; every load of {a.name} takes these settings from now on."))
        dialog.open()
        return dialog

    def unload(self, model: ModelInfo) -> None:
        call = self.api.unload_model(model.name)
        call.succeeded.connect(lambda r: (self._say(unloaded_sentence(model.name, r)), self.models.refresh()))
        call.failed.connect(lambda e: self._say(e.message, error=True))

    def confirm_delete(self, model: ModelInfo) -> None:
        deletes = model.deletes_files
        if deletes is None:  # a worker that does not say: its files go where they are Hearth's own
            deletes = model.source in ("hub", "upload") and not model.origin
        if model.origin or not deletes:
            owner = (
                f"Its file ({model.path}) is in one of your model folders and stays there." if model.origin == "folder"
                else f"Its files belong to {model.origin_label} and stay where they are." if model.origin
                else f"Its files ({model.path}) stay where they are."
            )  # fmt: skip
            confirm(self, "Remove model", f"Remove {model.name} from Hearth? {owner}", "Remove", lambda: self.delete(model))
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
        call.succeeded.connect(lambda answer: (self._say(deleted_sentence(answer)), self.files_changed()))
        call.failed.connect(lambda e: self._say(e.message, error=True))

    def files_changed(self) -> None:
        """A model arrived on disk or left it: the models, and the count of each model folder, are listed again."""
        self.models.refresh()
        self.folders.refresh()

    # -- importing ----------------------------------------------------------------------------
    def choose_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", "", "GGUF models (*.gguf)")
        if path:
            self.import_file(path)

    def import_file(self, path: str) -> None:
        """Import the GGUF at ``path``; the models on this computer show, where it arrives."""
        self.tabs.setCurrentWidget(self.local_tab)
        self._say(f"Importing {path}…")
        call = self.api.import_model(path)
        call.succeeded.connect(lambda m: (self._say(f"{m.name} is ready to use."), self.files_changed()))
        call.failed.connect(self._import_failed)

    def _import_failed(self, error: ApiError) -> None:
        self._say(error.message, error=True)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if any(u.toLocalFile().lower().endswith(".gguf") for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        for url in event.mimeData().urls():
            if url.toLocalFile().lower().endswith(".gguf"):
                self.import_file(url.toLocalFile())
        event.acceptProposedAction()
