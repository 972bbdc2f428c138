"""The Hardware page: what the engine found, which backend each kind of model uses and why,
and how the selected model with its context fits into VRAM or RAM."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.net.api import HearthApi
from app.net.catalog_types import FitFacts, HardwareReport
from app.net.local_models import LocalModels
from app.net.types import ApiError, ModelInfo
from app.pages.machine_summary import machine_summary
from app.theme import ThemeColors
from app.units import human_bytes
from app.widgets.memory_bar import MemoryBar, MemoryNeed, estimate_memory

GPU_USABLE = 0.90
RAM_USABLE = 0.80


def card(title: str) -> tuple[QFrame, QVBoxLayout]:
    frame = QFrame()
    frame.setObjectName("Card")
    column = QVBoxLayout(frame)
    column.setContentsMargins(18, 14, 18, 16)
    column.setSpacing(8)
    label = QLabel(title)
    label.setObjectName("SectionTitle")
    column.addWidget(label)
    return frame, column


class HardwarePage(QWidget):
    def __init__(self, api: HearthApi, models: LocalModels, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Page")
        self.api = api
        self.models = models
        self.colors = colors
        self.facts: HardwareReport | None = None
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        body = QWidget()
        body.setObjectName("Page")
        scroll.setWidget(body)
        column = QVBoxLayout(body)
        column.setContentsMargins(28, 22, 28, 22)
        column.setSpacing(14)
        header = QHBoxLayout()
        title = QLabel("Hardware")
        title.setObjectName("PageTitle")
        header.addWidget(title)
        header.addStretch()
        refresh = QPushButton("Check again")
        refresh.clicked.connect(self.refresh)
        header.addWidget(refresh)
        column.addLayout(header)
        self.message = QLabel("Waiting for the engine…")
        self.message.setObjectName("Muted")
        self.message.setWordWrap(True)
        column.addWidget(self.message)
        facts_card, facts_col = card("This computer")
        self.summary = QLabel()  # what it runs well: from the worker's labels of the recommended models
        self.summary.setObjectName("machineSummary")
        self.summary.setWordWrap(True)
        self.summary.hide()
        facts_col.addWidget(self.summary)
        self.facts_grid = QGridLayout()
        self.facts_grid.setHorizontalSpacing(24)
        self.facts_grid.setVerticalSpacing(6)
        facts_col.addLayout(self.facts_grid)
        column.addWidget(facts_card)
        backends_card, backends_col = card("Which engine runs what")
        self.backends_grid = QGridLayout()
        self.backends_grid.setHorizontalSpacing(24)
        backends_col.addLayout(self.backends_grid)
        column.addWidget(backends_card)
        fit_card, fit_col = card("Will it fit?")
        row = QHBoxLayout()
        self.model_combo = QComboBox()
        self.model_combo.setObjectName("fitModel")
        self.model_combo.setMinimumWidth(260)
        self.ctx = QSpinBox()
        self.ctx.setObjectName("fitContext")
        self.ctx.setRange(512, 262144)
        self.ctx.setSingleStep(1024)
        self.ctx.setValue(4096)
        self.ctx.setSuffix(" tokens of context")
        row.addWidget(self.model_combo)
        row.addWidget(self.ctx)
        row.addStretch()
        fit_col.addLayout(row)
        self.vram_label = QLabel()
        self.vram_bar = MemoryBar(colors)
        self.ram_label = QLabel()
        self.ram_bar = MemoryBar(colors)
        self.bar_legend = QLabel()
        self.bar_legend.setObjectName("Muted")
        self.bar_legend.setWordWrap(True)
        for w in (self.vram_label, self.vram_bar, self.ram_label, self.ram_bar, self.bar_legend):
            fit_col.addWidget(w)
            w.hide()  # until the engine says what memory there is
        column.addWidget(fit_card)
        column.addStretch(1)
        self.model_combo.currentIndexChanged.connect(self.update_fit)
        self.ctx.valueChanged.connect(self.update_fit)
        self.models.changed.connect(self._models)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.vram_bar.set_colors(colors)
        self.ram_bar.set_colors(colors)

    def refresh(self) -> None:
        call = self.api.hardware()
        call.succeeded.connect(self._facts)
        call.failed.connect(self._failed)
        # Discover's labels, without the hub: the fit plan and the speed model for this machine
        labels = self.api.hub_recommended(live=False)
        labels.succeeded.connect(lambda listing: self._show_summary(machine_summary(listing)))

    def _show_summary(self, text: str) -> None:
        self.summary.setText(f"<b>{text}</b>")
        self.summary.show()

    def _failed(self, error: ApiError) -> None:
        self.message.setText(error.message)
        self.message.show()

    @staticmethod
    def _fill(grid: QGridLayout, rows: list[tuple[str, str]]) -> None:
        while grid.count():
            item = grid.takeAt(0)
            if item.widget():
                item.widget().deleteLater()
        for i, (key, value) in enumerate(rows):
            k = QLabel(key)
            k.setObjectName("Muted")
            v = QLabel(value)
            v.setWordWrap(True)
            grid.addWidget(k, i, 0)
            grid.addWidget(v, i, 1)
        grid.setColumnStretch(1, 1)

    def _facts(self, facts: HardwareReport) -> None:
        self.facts = facts
        self.message.hide()
        hw = facts.hardware
        rows = [("Processor", f"{hw.cpu.model} ({hw.cpu.arch}), {hw.cpu.cores_logical} threads")]
        rows.append(("Memory", f"{human_bytes(hw.ram_total)} ({human_bytes(hw.ram_available)} free)"))
        for g in hw.gpus:
            free = f", {human_bytes(g.memory_free)} free" if g.memory_free is not None else ""
            kind = "unified memory" if g.unified_memory or hw.apple_silicon else "VRAM"
            rows.append(("GPU", f"{g.name}: {human_bytes(g.memory_total)} {kind}{free}"))
        if not hw.gpus:
            rows.append(("GPU", "None found: models run on the processor."))
        if hw.disk_free is not None:
            rows.append(("Free disk", human_bytes(hw.disk_free)))
        if hw.os:
            rows.append(("System", hw.os))
        rows += [("Note", n) for n in hw.notes]
        self._fill(self.facts_grid, rows)
        self._fill(self.backends_grid, [(b.format.upper(), f"<b>{b.backend}</b> — {b.reason}") for b in facts.backends])
        self.update_fit()

    def _models(self, models: list[ModelInfo]) -> None:
        current = self.model_combo.currentData()
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        for m in models:
            self.model_combo.addItem(m.name, m.name)
        index = self.model_combo.findData(current)
        self.model_combo.setCurrentIndex(max(index, 0))
        self.model_combo.blockSignals(False)
        self.update_fit()

    def update_fit(self) -> None:
        model = self.models.get(self.model_combo.currentData() or "")
        if model is None or self.facts is None:
            return
        facts = self.facts.hardware
        # A quick local picture at once; the engine's plan (GET /api/fit, what its loader would
        # allocate: slots, KV cache type, buffers) replaces it when it comes.
        key = (model.name, self.ctx.value())
        self._fit_key = key
        call = self.api.fit(model.name, ctx=self.ctx.value())
        call.succeeded.connect(lambda fit, key=key: self._show_plan(key, fit))
        need = estimate_memory(model, self.ctx.value())
        vram = sum(g.memory_free if g.memory_free is not None else g.memory_total for g in facts.gpus)
        ram = facts.ram_available
        self.vram_bar.setVisible(bool(facts.gpus))
        self.vram_label.setVisible(bool(facts.gpus))
        self.vram_bar.set_values(need, int(vram * GPU_USABLE))
        self.ram_bar.set_values(need, int(ram * RAM_USABLE))
        for w in (self.ram_label, self.ram_bar, self.bar_legend):
            w.show()
        total = human_bytes(need.total)
        self.vram_label.setText(f"GPU memory: needs {total} of {human_bytes(vram * GPU_USABLE)} usable")
        self.ram_label.setText(f"RAM: needs {total} of {human_bytes(ram * RAM_USABLE)} usable")
        if facts.gpus and self.vram_bar.fits:
            verdict = "Fits fully on the GPU."
        elif self.ram_bar.fits:
            verdict = "Runs from RAM on the processor." if not facts.gpus else "Too big for the GPU alone: part runs on the processor."
        else:
            verdict = "Will not fit in this computer's memory; pick a smaller variant or a shorter context."
        kv = "estimated" if need.kv_estimated else "from the model file"
        self.bar_legend.setText(
            f"<b>{verdict}</b> Weights {human_bytes(need.weights)} · context (KV cache, {kv}) "
            f"{human_bytes(need.kv_cache)} · runtime {human_bytes(need.overhead)}"
        )

    def _show_plan(self, key: tuple[str, int], fit: FitFacts) -> None:
        """The engine's plan for the chosen model and context, per device, as the loader would make it."""
        if key != getattr(self, "_fit_key", None):
            return  # the choice changed while the engine answered
        ram = next((d for d in fit.devices if d.device == "cpu"), None)
        gpus = [d for d in fit.devices if d.device != "cpu"]
        if ram is not None:
            self.ram_bar.set_values(MemoryNeed(ram.weights, ram.kv_cache, ram.overhead, False), ram.usable)
            self.ram_label.setText(f"RAM: needs {human_bytes(ram.total)} of {human_bytes(ram.usable)} usable")
        if gpus:
            used = MemoryNeed(sum(d.weights for d in gpus), sum(d.kv_cache for d in gpus), sum(d.overhead for d in gpus), False)
            usable = sum(d.usable for d in gpus)
            self.vram_bar.set_values(used, usable)
            layers = sum(d.layers for d in gpus)
            self.vram_label.setText(
                f"GPU memory: needs {human_bytes(used.total)} of {human_bytes(usable)} usable ({layers} layers)"
            )
        verdict = f"Loads as {fit.summary}." if fit.fits else "Will not fit this way."
        self.bar_legend.setText(
            f"<b>{verdict}</b> Weights {human_bytes(fit.weights)} · KV cache {human_bytes(fit.kv_cache)} · "
            f"buffers and runtime {human_bytes(fit.overhead)}<br>{_why(fit)}"
        )


def _why(fit: FitFacts) -> str:
    """The plan's reason without the plan it begins with (``16 slots of 4,096 tokens...: ``), said just above."""
    for said in (f"{fit.summary}: ", f"{fit.summary}. "):
        if fit.reason.startswith(said):
            rest = fit.reason.removeprefix(said)
            return rest[:1].upper() + rest[1:]
    return fit.reason
