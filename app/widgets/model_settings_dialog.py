"""A local model's load settings, with the fit plan updating as the values change.

The settings are the worker's (``GET``/``PUT /api/models/NAME/settings``): every load of the model takes them,
the loads a chat request triggers included. The plan is ``GET /api/fit`` with the values shown, asked again a
moment after the last change (never on every keystroke), and a late answer for older values is dropped.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.net.api import HearthApi
from app.net.catalog_types import FitFacts
from app.net.types import ApiError
from engine.server.api_models import LoadSettings, ModelSettingsAnswer

AUTO = "Auto"
KV_TYPES = ("f16", "q8_0", "q4_0")
# Speculative decoding: the choices and the worker's values; Automatic leaves it to the worker (prompt lookup
# where it pays, unless the worker was started with another --speculative).
SPECULATIVE = (("Automatic", None), ("Prompt lookup", "ngram"), ("Off", "off"))
FIT_DELAY_MS = 250


def _spin(low: int, high: int, *, step: int = 1, special: str = AUTO, suffix: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setSpecialValueText(special)  # shown at the minimum: "Hearth chooses"
    box.setSuffix(suffix)
    return box


class ModelSettingsDialog(QDialog):
    """The settings of the model ``name``; ``saved`` carries what the worker saved."""

    saved = Signal(object)  # ModelSettingsAnswer

    def __init__(self, api: HearthApi, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self.name = name
        self.fit_facts: FitFacts | None = None
        self._asked = 0  # the latest fit request; older answers are dropped
        self._saved_settings = LoadSettings()  # the worker's saved settings, once they come
        self.setWindowTitle(f"Load settings: {name}")
        column = QVBoxLayout(self)
        intro = QLabel("Every load of this model takes these settings, the loads a chat starts included. "
                       "Auto lets Hearth choose what fits this computer.")  # fmt: skip
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        column.addWidget(intro)
        form = QFormLayout()
        self.ctx = _spin(0, 1 << 20, step=1024, suffix=" tokens")
        self.gpu_layers = _spin(-1, 999)
        self.kv_type = QComboBox()
        self.kv_type.addItems([AUTO, *KV_TYPES])
        self.flash_attn = QComboBox()
        self.flash_attn.addItems([AUTO, "On", "Off"])
        self.threads = _spin(0, 1024)
        self.batch = _spin(0, 65536, step=64, suffix=" tokens")
        self.rope_scale = QDoubleSpinBox()
        self.rope_scale.setRange(0.0, 64.0)
        self.rope_scale.setSingleStep(1.0)
        self.rope_scale.setSpecialValueText("Off")
        self.rope_orig_ctx = _spin(0, 1 << 20, step=1024, special="From the file", suffix=" tokens")
        self.cpu_moe = _spin(-1, 999, special="All layers", suffix=" layers")
        self.speculative = QComboBox()
        for text, value in SPECULATIVE:
            self.speculative.addItem(text, value)
        self.speculative.setToolTip("Drafts the text an answer repeats from its prompt and checks it in one step: "
                                    "faster answers, the same text. Automatic drafts where it pays.")  # fmt: skip
        form.addRow("Context length", self.ctx)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("KV cache type", self.kv_type)
        form.addRow("Flash attention", self.flash_attn)
        form.addRow("CPU threads", self.threads)
        form.addRow("Batch size", self.batch)
        form.addRow("RoPE scaling (YaRN factor)", self.rope_scale)
        form.addRow("Trained context for YaRN", self.rope_orig_ctx)
        form.addRow("MoE experts on the CPU", self.cpu_moe)
        form.addRow("Speculative decoding", self.speculative)
        column.addLayout(form)
        self.fit_label = QLabel("Working out how it fits…")
        self.fit_label.setObjectName("fitPlan")
        self.fit_label.setWordWrap(True)
        column.addWidget(self.fit_label)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.hide()
        column.addWidget(self.error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        column.addWidget(self.buttons)
        self._fit_timer = QTimer(self, singleShot=True, interval=FIT_DELAY_MS)
        self._fit_timer.timeout.connect(self.ask_fit)
        later = lambda *_: self._fit_timer.start()  # noqa: E731 - the signals' values are no intervals
        for box in (self.ctx, self.gpu_layers, self.threads, self.batch, self.rope_orig_ctx, self.cpu_moe, self.rope_scale):
            box.valueChanged.connect(later)
        self.kv_type.currentIndexChanged.connect(later)
        self.flash_attn.currentIndexChanged.connect(later)
        call = api.model_settings(name)
        call.succeeded.connect(self._show_settings)
        call.failed.connect(self._failed)

    # -- values ---------------------------------------------------------------------------------
    def _show_settings(self, answer: ModelSettingsAnswer) -> None:
        s = answer.settings
        self._saved_settings = s  # what the dialog does not show (the slots `hearth load --parallel` saved) is kept
        self.ctx.setValue(s.n_ctx or 0)
        self.gpu_layers.setValue(-1 if s.n_gpu_layers is None else s.n_gpu_layers)
        self.kv_type.setCurrentText(s.kv_type or AUTO)
        self.flash_attn.setCurrentText(AUTO if s.flash_attn is None else ("On" if s.flash_attn else "Off"))
        self.threads.setValue(s.n_threads or 0)
        self.batch.setValue(s.n_batch or 0)
        self.rope_scale.setValue(s.rope_scale or 0.0)
        self.rope_orig_ctx.setValue(s.rope_orig_ctx or 0)
        self.cpu_moe.setValue(s.cpu_moe or 0)
        self._show_speculative(s.speculative)
        self.ask_fit()

    def _show_speculative(self, value: str | None) -> None:
        if value == "auto":  # saved as such: kept as such
            self.speculative.setItemData(0, "auto")
        index = self.speculative.findData(value)
        if index < 0:  # a mode the dialog does not offer (a draft model, set by `hearth load`): kept, shown
            self.speculative.addItem(value.replace("draft:", "Draft model: ", 1) if value else AUTO, value)
            index = self.speculative.count() - 1
        self.speculative.setCurrentIndex(index)

    def settings(self) -> LoadSettings:
        """The values shown, as ``PUT /api/models/NAME/settings`` takes them (None: Hearth chooses)."""
        flash = self.flash_attn.currentText()
        return self._saved_settings.model_copy(update=dict(
            n_ctx=self.ctx.value() or None,
            n_gpu_layers=None if self.gpu_layers.value() < 0 else self.gpu_layers.value(),
            kv_type=None if self.kv_type.currentText() == AUTO else self.kv_type.currentText(),
            flash_attn=None if flash == AUTO else flash == "On",
            n_threads=self.threads.value() or None,
            n_batch=self.batch.value() or None,
            rope_scale=self.rope_scale.value() or None,
            rope_orig_ctx=self.rope_orig_ctx.value() or None,
            cpu_moe=self.cpu_moe.value() or None,
            speculative=self.speculative.currentData(),
        ))

    # -- the fit plan ---------------------------------------------------------------------------
    def ask_fit(self) -> None:
        s = self.settings()
        self._asked += 1
        asked = self._asked
        call = self.api.fit(self.name, ctx=s.n_ctx, kv_type=s.kv_type, gpu_layers=s.n_gpu_layers,
                            flash_attn=s.flash_attn, cpu_moe=s.cpu_moe)  # fmt: skip
        call.succeeded.connect(lambda facts: self._show_fit(asked, facts))
        call.failed.connect(lambda error: self._fit_failed(asked, error))

    def _show_fit(self, asked: int, facts: FitFacts) -> None:
        if asked != self._asked:
            return
        self.fit_facts = facts
        head = "Fits: " if facts.fits else "Does not fit: "
        text = head + (facts.summary if facts.fits else facts.reason)
        if facts.fits and facts.speed:  # how fast it would answer with these settings
            text += f"\nSpeed: {facts.speed}" + (f"; {facts.speed_full}" if facts.speed_full else "") + "."
        self.fit_label.setText(text)

    def _fit_failed(self, asked: int, error: ApiError) -> None:
        if asked == self._asked:
            self.fit_facts = None
            self.fit_label.setText(error.message)

    # -- saving ---------------------------------------------------------------------------------
    def save(self) -> None:
        self.buttons.setEnabled(False)
        call = self.api.save_model_settings(self.name, self.settings())
        call.succeeded.connect(self._saved)
        call.failed.connect(self._failed)

    def _saved(self, answer: ModelSettingsAnswer) -> None:
        self.saved.emit(answer)
        self.accept()

    def _failed(self, error: ApiError) -> None:
        self.buttons.setEnabled(True)
        self.error.setText(error.message)
        self.error.show()
