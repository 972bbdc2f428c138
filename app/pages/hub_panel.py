"""HubPanel: search the Hub and see each repo's variants labelled by the advisor for this machine."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
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
from app.net.catalog_types import Download, HubRepo, HubVariant, VariantList
from app.net.types import ApiError
from app.theme import ThemeColors
from app.units import human_bytes, human_count

SORTS = (("Most downloaded", "downloads"), ("Most liked", "likes"), ("Recently updated", "recent"))
FORMATS = (("Any format", ""), ("GGUF", "gguf"), ("MLX", "mlx"), ("Safetensors", "safetensors"))
VARIANT_COLUMNS = ("Variant", "Format", "Size", "On this machine", "", "")


class HubPanel(QWidget):
    download_started = Signal(Download)
    message = Signal(str, bool)  # text, is an error

    def __init__(self, api: HearthApi, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self.colors = colors
        self.variants: VariantList | None = None
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
        column.addLayout(bar)
        body = QHBoxLayout()
        self.results = QListWidget()
        self.results.setObjectName("hubResults")
        self.results.setFixedWidth(330)
        self.results.currentItemChanged.connect(lambda item, _prev: self.show_variants(item.data(Qt.ItemDataRole.UserRole)) if item else None)
        body.addWidget(self.results)
        right = QVBoxLayout()
        top = QHBoxLayout()
        self.repo_title = QLabel("Pick a result to see its variants.")
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
        body.addLayout(right, 1)
        column.addLayout(body, 1)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.search_icon.setIcon(icon("search", colors.muted))

    def _fail(self, error: ApiError) -> None:
        self.search_button.setEnabled(True)
        self.message.emit(error.message, True)

    # -- search -------------------------------------------------------------------------------
    def search(self) -> None:
        self.search_button.setEnabled(False)
        self.message.emit("Searching the Hub…", False)
        call = self.api.hub_search(self.query.text().strip(), sort=self.sort.currentData(), fmt=self.format.currentData())
        call.succeeded.connect(self._results)
        call.failed.connect(self._fail)

    def _results(self, repos: list[HubRepo]) -> None:
        self.search_button.setEnabled(True)
        self.results.clear()
        for r in repos:
            formats = ", ".join(f.upper() for f in r.formats) or "—"
            item = QListWidgetItem(f"{r.repo}\n↓ {human_count(r.downloads)}   ♥ {human_count(r.likes)}   {formats}")
            item.setData(Qt.ItemDataRole.UserRole, r.repo)
            item.setSizeHint(QSize(300, 52))
            self.results.addItem(item)
        self.message.emit(f"{len(repos)} models found." if repos else "Nothing found; try other words.", False)

    # -- variants -----------------------------------------------------------------------------
    def show_variants(self, repo: str) -> None:
        self.repo_title.setText(repo)
        self.recommendation.setText("Asking the advisor…")
        self.table.setRowCount(0)
        call = self.api.hub_variants(repo, ctx=self.ctx.value())
        call.succeeded.connect(self._variants)
        call.failed.connect(lambda e: (self.recommendation.setText(""), self.message.emit(e.message, True)))

    def fit_color(self, fit: str) -> str:
        c = self.colors
        return {"gpu": c.success, "partial": c.accent, "cpu": c.muted, "none": c.error_text}.get(fit, c.muted)

    def _variants(self, listing: VariantList) -> None:
        self.variants = listing
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
        self.table.setItem(row, 1, QTableWidgetItem(v.format.upper()))
        self.table.setItem(row, 2, QTableWidgetItem(human_bytes(v.size_bytes)))
        memory = f" · {human_bytes(v.memory_bytes)}" if v.memory_bytes and v.fit != "none" else ""
        label = QLabel(f'<span style="color:{self.fit_color(v.fit)}; font-weight:600;">{v.label}</span>{memory}')
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
