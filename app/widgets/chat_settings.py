"""ChatSettingsPanel: the current chat's system prompt, sampling and thinking switch, and the context policy.

Edits apply to the chat as they are made (typing after a short pause, the switch at once), for its next answer.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.store.records import ChatSettings, SamplingSettings

APPLY_DELAY_MS = 300
POLICY = (
    "When a chat grows longer than the model's context, the oldest messages are left out "
    "(the system prompt is always kept) and the answer says how many."
)


class ChatSettingsPanel(QFrame):
    settings_changed = Signal(ChatSettings)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.setFixedWidth(290)
        self._settings = ChatSettings()
        self._loading = False
        column = QVBoxLayout(self)
        column.setContentsMargins(14, 14, 14, 14)
        column.setSpacing(10)
        title = QLabel("Chat settings")
        title.setObjectName("SectionTitle")
        column.addWidget(title)
        column.addWidget(QLabel("System prompt"))
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("systemPrompt")
        self.system_prompt.setPlaceholderText("e.g. You are a concise assistant.")
        self.system_prompt.setFixedHeight(110)
        column.addWidget(self.system_prompt)
        column.addLayout(self._sampling_form())
        # Checked unless switched off: a chat that never chose keeps the model's own default (None).
        self.thinking = QCheckBox("Let the model think first")
        self.thinking.setObjectName("thinkingSwitch")
        self.thinking.setToolTip("Off: models that can answer without thinking do (their chat template says so)")
        self.thinking.toggled.connect(self._switched)
        self.thinking.hide()  # until the chat's model is known to think (set_thinking_offered)
        column.addWidget(self.thinking)
        policy_title = QLabel("Long chats")
        policy_title.setObjectName("SectionTitle")
        column.addSpacing(6)
        column.addWidget(policy_title)
        policy = QLabel(POLICY)
        policy.setObjectName("Muted")
        policy.setWordWrap(True)
        column.addWidget(policy)
        column.addStretch(1)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(APPLY_DELAY_MS)
        self._timer.timeout.connect(self.apply_now)
        for signal in (
            self.system_prompt.textChanged,
            self.temperature.valueChanged,
            self.top_p.valueChanged,
            self.max_tokens.valueChanged,
            self.seed.textChanged,
        ):
            signal.connect(self._edited)

    def _sampling_form(self) -> QFormLayout:
        form = QFormLayout()
        form.setVerticalSpacing(8)
        self.temperature = QDoubleSpinBox()
        self.temperature.setObjectName("temperature")
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.top_p = QDoubleSpinBox()
        self.top_p.setObjectName("topP")
        self.top_p.setRange(0.05, 1.0)
        self.top_p.setSingleStep(0.05)
        self.max_tokens = QSpinBox()
        self.max_tokens.setObjectName("maxTokens")
        self.max_tokens.setRange(0, 32768)
        self.max_tokens.setSpecialValueText("no limit")
        self.seed = QLineEdit()
        self.seed.setObjectName("seed")
        self.seed.setPlaceholderText("random")
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Seed", self.seed)
        return form

    def set_settings(self, settings: ChatSettings) -> None:
        self._timer.stop()
        self._loading = True
        self._settings = settings
        self.system_prompt.setPlainText(settings.system_prompt)
        self.temperature.setValue(settings.sampling.temperature)
        self.top_p.setValue(settings.sampling.top_p)
        self.max_tokens.setValue(settings.sampling.max_tokens or 0)
        self.seed.setText("" if settings.sampling.seed is None else str(settings.sampling.seed))
        self.thinking.setChecked(settings.thinking is not False)
        self._loading = False

    def set_thinking_offered(self, offered: bool) -> None:
        """Show the thinking switch only for a model that can think; the chat's choice is kept either way."""
        self.thinking.setVisible(offered)

    def current(self) -> ChatSettings:
        seed_text = self.seed.text().strip()
        sampling = SamplingSettings(
            temperature=round(self.temperature.value(), 2),
            top_p=round(self.top_p.value(), 2),
            max_tokens=self.max_tokens.value() or None,
            seed=int(seed_text) if seed_text.lstrip("-").isdigit() else None,
        )
        thinking = self._settings.thinking  # unchanged while the box shows it (None shows checked)
        if self.thinking.isChecked() != (thinking is not False):
            thinking = self.thinking.isChecked()
        return replace(self._settings, system_prompt=self.system_prompt.toPlainText(), sampling=sampling, thinking=thinking)

    def _edited(self, *_args) -> None:
        if not self._loading:
            self._timer.start()

    def _switched(self, _on: bool) -> None:
        if not self._loading:
            self.apply_now()

    def apply_now(self) -> None:
        """Apply pending edits at once (also done before a message is sent)."""
        if self._timer.isActive() or self.current() != self._settings:
            self._timer.stop()
            self._settings = self.current()
            self.settings_changed.emit(self._settings)
