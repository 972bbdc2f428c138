"""HubPanel: search the Hub and see each repo's variants labelled by the advisor for this machine.

It opens on Hearth's recommended models, grouped by use, each with the variant the fit plan suggests
here: first from the worker's own list (no network), then with the hub's downloads and likes once the
tab is shown. Picking one opens its variants, as picking a search result does.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QFont, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.icons import icon
from app.net.api import HearthApi
from app.net.catalog_types import (
    Download,
    HubRepo,
    HubVariant,
    RecommendedList,
    RecommendedModel,
    VariantList,
)
from app.net.types import ApiError
from app.store.settings_store import SettingsStore
from app.theme import ThemeColors
from app.units import counted, human_bytes, human_count

SORTS = (("Most downloaded", "downloads"), ("Most liked", "likes"), ("Recently updated", "recent"))
FORMATS = (("Any format", ""), ("GGUF", "gguf"), ("MLX", "mlx"), ("Safetensors", "safetensors"))
VARIANT_COLUMNS = ("Variant", "Format", "Size", "On this machine", "", "")
PICK_ROLE = Qt.ItemDataRole.UserRole + 1  # a recommended row's RecommendedModel
PICK_TEXT = "Pick a model to see its variants."


def because(what: str, error: ApiError) -> str:
    """One sentence: ``what`` went wrong, then the worker's reason (``"X could not be listed: could not reach
    the model hub…"``)."""
    reason = error.message.strip()
    if reason[:1].isupper() and not reason[1:2].isupper():  # "Could not…" goes on as "could not…"; "HF_…" stays
        reason = reason[0].lower() + reason[1:]
    return f"{what}: {reason}" if reason.endswith(".") else f"{what}: {reason}."


def _note_instead(note: QLabel, view: QWidget, text: str) -> None:
    """An empty list or table says why in ``note``, in its place; without ``text`` the view shows again."""
    note.setText(text)
    note.setVisible(bool(text))
    view.setVisible(not text)


class HubPanel(QWidget):
    download_started = Signal(Download)
    message = Signal(str, bool)  # text, is an error

    def __init__(
        self, api: HearthApi, colors: ThemeColors, parent: QWidget | None = None, *, settings: SettingsStore | None = None
    ) -> None:
        super().__init__(parent)
        self.api = api
        self.colors = colors
        self.settings = settings
        self.variants: VariantList | None = None
        self.picks: RecommendedList | None = None
        self.showing_picks = True
        self._asking_picks = False
        self._asked_hub = False
        self._asked_repo: str | None = None  # the repo whose variants were asked for last ("" after a search)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 12, 0, 0)
        column.setSpacing(10)
        bar = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setObjectName("hubSearch")
        self.query.setPlaceholderText("Search models on the Hub, e.g. llama, qwen, phi")
        self.query.returnPressed.connect(self.search)
        self.search_icon = self.query.addAction(icon("search", colors.muted), QLineEdit.ActionPosition.LeadingPosition)
        bar.addWidget(self.query, 1)
        self.sort = QComboBox()
        self.format = QComboBox()
        for label, value in SORTS:
            self.sort.addItem(label, value)
        for label, value in FORMATS:
            self.format.addItem(label, value)
        bar.addWidget(self.sort)
        bar.addWidget(self.format)
        self.search_button = QPushButton("Search")
        self.search_button.setObjectName("hubSearchButton")
        self.search_button.setProperty("primary", True)
        self.search_button.clicked.connect(self.search)
        bar.addWidget(self.search_button)
        self.picks_button = QPushButton("Recommended")
        self.picks_button.setObjectName("hubPicksButton")
        self.picks_button.setToolTip("Models Hearth recommends, labelled for this computer")
        self.picks_button.clicked.connect(self.show_picks)
        bar.addWidget(self.picks_button)
        column.addLayout(bar)
        body = QHBoxLayout()
        left = QVBoxLayout()
        self.list_title = QLabel("Recommended for this computer")
        self.list_title.setObjectName("Muted")
        left.addWidget(self.list_title)
        self.results = QListWidget()
        self.results.setObjectName("hubResults")
        self.results.setFixedWidth(330)
        self.results.currentItemChanged.connect(self._picked)
        left.addWidget(self.results, 1)
        self.results_note = self._note()
        self.results_note.setFixedWidth(330)
        left.addWidget(self.results_note, 1)
        body.addLayout(left)
        right = QVBoxLayout()
        top = QHBoxLayout()
        self.repo_title = QLabel(PICK_TEXT)
        self.repo_title.setObjectName("SectionTitle")
        top.addWidget(self.repo_title, 1)
        top.addWidget(QLabel("Context"))
        self.ctx = QSpinBox()
        self.ctx.setRange(512, 262144)
        self.ctx.setSingleStep(1024)
        self.ctx.setValue(4096)
        self.ctx.setSuffix(" tokens")
        self.ctx.setToolTip("The advisor counts this much context into each variant's memory")
        self.ctx.editingFinished.connect(lambda: self.show_variants(self.variants.repo) if self.variants else None)
        top.addWidget(self.ctx)
        top.addWidget(QLabel("Slow under"))
        self.min_speed = QSpinBox()
        self.min_speed.setObjectName("hubMinSpeed")
        self.min_speed.setRange(1, 500)
        self.min_speed.setSuffix(" tok/s")
        self.min_speed.setValue(round(settings.load().min_speed) if settings is not None else 10)
        self.min_speed.setToolTip("A model expected to answer slower than this here is not recommended")
        self.min_speed.editingFinished.connect(self._min_speed_changed)
        top.addWidget(self.min_speed)
        right.addLayout(top)
        self.recommendation = QLabel()
        self.recommendation.setObjectName("Muted")
        self.recommendation.setWordWrap(True)
        right.addWidget(self.recommendation)
        self.table = QTableWidget(0, len(VARIANT_COLUMNS))
        self.table.setObjectName("hubVariants")
        self.table.setHorizontalHeaderLabels(VARIANT_COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setShowGrid(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setDefaultSectionSize(38)
        self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        right.addWidget(self.table, 1)
        self.variants_note = self._note()
        right.addWidget(self.variants_note, 1)
        body.addLayout(right, 1)
        column.addLayout(body, 1)

    @staticmethod
    def _note() -> QLabel:
        """A sentence in place of an empty list or table (hidden until one is said)."""
        note = QLabel()
        note.setObjectName("Muted")
        note.setWordWrap(True)
        note.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        note.setContentsMargins(4, 8, 4, 8)
        note.hide()
        return note

    def _min_speed_changed(self) -> None:
        if self.settings is not None:
            self.settings.save(replace(self.settings.load(), min_speed=float(self.min_speed.value())))
        if self.variants is not None:
            self.show_variants(self.variants.repo)
        if self.showing_picks:
            self.picks = None  # judged again at the new threshold
            self.load_picks(live=self._asked_hub)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.search_icon.setIcon(icon("search", colors.muted))

    def _fail(self, error: ApiError) -> None:
        self.search_button.setEnabled(True)
        if self.showing_picks:  # the picks were asked for again meanwhile
            return
        self.message.emit("", False)  # the empty results say why
        _note_instead(self.results_note, self.results, because("The Hub could not be searched", error))

    def _picked(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        repo = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if repo:
            self.show_variants(repo)

    # -- recommended models -------------------------------------------------------------------
    def engine_ready(self) -> None:
        """The worker is up: fetch the recommended list from its own data (no network)."""
        if self.picks is None:
            self.load_picks(live=False)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if self.picks is None and not self._asking_picks and self.api.engine.root_url:
            self.load_picks(live=False)
        self._ask_hub_once()

    def _ask_hub_once(self) -> None:
        # the hub is asked only once someone looks at the tab, and only once per run
        if self.picks is not None and not self._asked_hub and self.isVisible():
            self._asked_hub = True
            self.load_picks(live=True)

    def load_picks(self, *, live: bool) -> None:
        self._asking_picks = True
        call = self.api.hub_recommended(live=live, ctx=self.ctx.value(), min_speed=self.min_speed.value())
        call.succeeded.connect(self._picks)
        call.failed.connect(lambda e: self._picks_failed(e, live))

    def _picks(self, picks: RecommendedList) -> None:
        self._asking_picks = False
        if self.picks is not None and self.picks.asked_hub and not picks.asked_hub:
            return  # an older answer from the list alone arrived after the hub's
        self.picks = picks
        if self.showing_picks:
            self.show_picks()
        self._ask_hub_once()

    def _picks_failed(self, error: ApiError, live: bool) -> None:
        self._asking_picks = False
        if live:  # the list from the worker's own data stays; say why the hub's details are missing
            self.message.emit(error.message, False)
        else:
            self.message.emit(error.message, True)
            if self.showing_picks and self.picks is None:
                _note_instead(self.results_note, self.results, because("The recommended models could not be listed", error))

    def show_picks(self) -> None:
        """List the recommended models, grouped by use (fetched first if not here yet)."""
        self.showing_picks = True
        self.list_title.setText("Recommended for this computer")
        _note_instead(self.results_note, self.results, "")
        if self.picks is None:
            if not self._asking_picks:
                self.load_picks(live=False)
            return
        current = self.results.currentItem()
        keep = current.data(Qt.ItemDataRole.UserRole) if current is not None else None
        self.results.blockSignals(True)
        self.results.clear()
        for category in self.picks.categories:
            models = [m for m in self.picks.models if m.category == category.id]
            if not models:
                continue
            header = QListWidgetItem(category.title)
            header.setFlags(Qt.ItemFlag.NoItemFlags)
            font = QFont(header.font())
            font.setBold(True)
            header.setFont(font)
            self.results.addItem(header)
            for m in models:
                item = self._pick_item(m)
                self.results.addItem(item)
                if m.repo == keep:
                    self.results.setCurrentItem(item)
        self.results.blockSignals(False)
        picks = self.picks
        if picks.asked_hub and picks.hub_error:
            self.message.emit(f"Sizes are from Hearth's list of {picks.as_of}. {picks.hub_error}", False)

    def _pick_item(self, m: RecommendedModel) -> QListWidgetItem:
        counts = f"   ↓ {human_count(m.downloads or 0)}   ♥ {human_count(m.likes or 0)}" if m.live else ""
        speed = f" · {m.speed}" if m.speed else ""  # "about 38 tok/s", or "slow here: about 1 tok/s"
        item = QListWidgetItem(f"{m.name}{counts}\n{m.label}{speed} · {m.variant} · {human_bytes(m.size_bytes)}")
        item.setData(Qt.ItemDataRole.UserRole, m.repo)
        item.setData(PICK_ROLE, m)
        item.setToolTip(f"{m.repo}\n{m.description}\n{m.reason}" + (f"\nExpected here: {m.speed_detail}" if m.speed_detail else ""))
        item.setSizeHint(QSize(300, 52))
        return item

    # -- search -------------------------------------------------------------------------------
    def search(self) -> None:
        self.search_button.setEnabled(False)
        self.message.emit("Searching the Hub…", False)
        # the results take the list's place (the Recommended button brings the picks back); the model shown
        # before goes, with any answer about it still to come
        self.showing_picks = False
        self.list_title.setText("Search results")
        self.results.clear()
        _note_instead(self.results_note, self.results, "")
        self._clear_variants()
        call = self.api.hub_search(self.query.text().strip(), sort=self.sort.currentData(), fmt=self.format.currentData())
        call.succeeded.connect(self._results)
        call.failed.connect(self._fail)

    def _results(self, repos: list[HubRepo]) -> None:
        self.search_button.setEnabled(True)
        if self.showing_picks:  # the picks were asked for again meanwhile
            return
        self.results.clear()
        for r in repos:
            formats = ", ".join(f.upper() for f in r.formats) or "—"
            sees = "   · vision" if r.vision else ""  # it has projector files: its GGUF models see
            item = QListWidgetItem(f"{r.repo}\n↓ {human_count(r.downloads)}   ♥ {human_count(r.likes)}   {formats}{sees}")
            item.setData(Qt.ItemDataRole.UserRole, r.repo)
            item.setSizeHint(QSize(300, 52))
            self.results.addItem(item)
        if repos:
            self.message.emit(f"{counted(len(repos), 'model')} found.", False)
        else:
            self.message.emit("", False)
            words = self.query.text().strip()
            matching = f" match “{words}”" if words else ""
            _note_instead(self.results_note, self.results, f"No models on the Hub{matching}; try other words or another format.")

    # -- variants -----------------------------------------------------------------------------
    def _clear_variants(self) -> None:
        self.variants = None
        self._asked_repo = ""
        self.repo_title.setText(PICK_TEXT)
        self.recommendation.setText("")
        self.table.setRowCount(0)
        _note_instead(self.variants_note, self.table, "")

    def show_variants(self, repo: str) -> None:
        self._asked_repo = repo
        self.repo_title.setText(repo)
        self.recommendation.setText("Asking the advisor…")
        self.table.setRowCount(0)
        _note_instead(self.variants_note, self.table, "")
        call = self.api.hub_variants(repo, ctx=self.ctx.value(), min_speed=self.min_speed.value())
        call.succeeded.connect(self._variants)
        call.failed.connect(lambda e: self._variants_failed(repo, e))

    def _variants_failed(self, repo: str, error: ApiError) -> None:
        if repo != self._asked_repo:  # another model (or a search) took its place meanwhile
            return
        self.recommendation.setText("")
        _note_instead(self.variants_note, self.table, because(f"The files of {repo} are not listed", error))

    def fit_color(self, fit: str) -> str:
        c = self.colors
        return {"gpu": c.success, "partial": c.accent, "cpu": c.muted, "none": c.error_text}.get(fit, c.muted)

    def _variants(self, listing: VariantList) -> None:
        if self._asked_repo is not None and listing.repo != self._asked_repo:
            return  # an answer about a model no longer shown
        self.variants = listing
        self.repo_title.setText(listing.repo)
        if not listing.variants:
            self.recommendation.setText("")
            _note_instead(self.variants_note, self.table,
                          f"{listing.repo} has no model files Hearth can run (GGUF, MLX or safetensors).")  # fmt: skip
            self.table.setRowCount(0)
            return
        _note_instead(self.variants_note, self.table, "")
        self.recommendation.setText(
            f"Recommended: <b>{listing.recommended}</b> — {listing.reason}" if listing.recommended else "No variant fits this machine well."
        )
        self.table.setRowCount(len(listing.variants))
        for row, v in enumerate(listing.variants):
            self._variant_row(row, v)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)

    def _variant_row(self, row: int, v: HubVariant) -> None:
        name = QTableWidgetItem(v.name)
        name.setData(Qt.ItemDataRole.UserRole, v)
        self.table.setItem(row, 0, name)
        self.table.setItem(row, 1, QTableWidgetItem(v.format.upper() + (" · vision" if v.vision else "")))
        size = v.size_bytes + (v.projector.size if v.projector is not None else 0)
        size_item = QTableWidgetItem(human_bytes(size))
        if v.projector is not None:
            size_item.setToolTip(f"With its projector {v.projector.path} ({human_bytes(v.projector.size)}), pulled with it")
        self.table.setItem(row, 2, size_item)
        memory = f" · {human_bytes(v.memory_bytes)}" if v.memory_bytes and v.fit != "none" else ""
        speed = ""
        if v.speed:  # the expected speed beside the fit label; slow ones in the error colour
            color = self.colors.error_text if v.slow else self.colors.muted
            speed = f' · <span style="color:{color};">{v.speed}</span>'
        label = QLabel(f'<span style="color:{self.fit_color(v.fit)}; font-weight:600;">{v.label}</span>{memory}{speed}')
        label.setToolTip(v.detail)
        label.setObjectName(f"fit_{v.name}")
        label.setContentsMargins(6, 0, 6, 0)
        self.table.setCellWidget(row, 3, label)
        badge = QLabel("★ Recommended" if v.recommended else "")
        badge.setStyleSheet(f"color:{self.colors.accent}; font-weight:600; padding: 0 6px;")
        self.table.setCellWidget(row, 4, badge)
        button = QPushButton("Download")
        button.setObjectName(f"download_{v.name}")
        button.setEnabled(v.fit != "none")
        button.setToolTip(v.detail or v.label)
        button.clicked.connect(lambda _checked=False, variant=v.name: self.download(variant))
        self.table.setCellWidget(row, 5, button)

    def download(self, variant: str) -> None:
        if self.variants is None:
            return
        call = self.api.start_download(self.variants.repo, variant)
        call.succeeded.connect(self.download_started)
        call.failed.connect(lambda e: self.message.emit(e.message, True))
