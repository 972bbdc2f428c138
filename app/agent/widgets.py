"""The agent's widgets in the chat: the thinking section, tool-call cards, the approval dialog.

Tool results are untrusted text: shown in plain-text widgets only (never rich text, never run),
cut to a few lines until expanded, and never longer than the loop keeps.
"""

from __future__ import annotations

import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.store.records import AnswerSteps
from app.units import counted
from engine.agent import Decision

CARD_PREVIEW_CHARS = 300


def _plain_label(text: str = "", name: str = "") -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)  # never rendered as HTML
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setText(text)
    if name:
        label.setObjectName(name)
    return label


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False)
    except ValueError:
        return arguments


class ThinkingSection(QFrame):
    """The model's thinking: streamed open, folded once the answer starts, expandable."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ThinkingSection")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.toggle = QToolButton()
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.toggle.setStyleSheet("QToolButton { border: none; }")
        self.toggle.toggled.connect(self._expand)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.body = _plain_label(name="Muted")
        layout.addWidget(self.body)
        self._user_choice: bool | None = None
        self._done = False

    @property
    def expanded(self) -> bool:
        return self.body.isVisible() if self.isVisible() else not self.body.isHidden()

    def show_steps(self, steps: AnswerSteps) -> None:
        self.setVisible(bool(steps.reasoning))
        self.body.setText(steps.reasoning.strip())
        took = f" for {steps.thinking_seconds:.1f} s" if steps.thinking_seconds else ""
        tokens = f" · {counted(steps.thinking_tokens, 'token')}" if steps.thinking_tokens else ""
        if steps.thinking_done:
            self.toggle.setText(f"{'▾' if self.toggle.isChecked() else '▸'} Thought{took}{tokens}")
            if not self._done:  # the answer began: fold, unless the user opened it
                self._done = True
                self.toggle.blockSignals(True)
                self.toggle.setChecked(bool(self._user_choice))
                self.toggle.blockSignals(False)
                self.body.setHidden(not self._user_choice)
        else:
            self.toggle.setText(f"Thinking…{tokens}")
            self.body.setHidden(False)

    def _expand(self, on: bool) -> None:
        self._user_choice = on
        self.body.setHidden(not on)
        text = self.toggle.text()
        self.toggle.setText(("▾" if on else "▸") + text[1:] if text[:1] in "▸▾" else text)


class ToolCallCard(QFrame):
    """One call: tool, server, status, duration, arguments, result (cut, expandable) or error."""

    def __init__(self, call: dict, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ToolCallCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(3)
        self.header = _plain_label(name="toolCallHeader")
        layout.addWidget(self.header)
        self.arguments = _plain_label(name="Muted")
        layout.addWidget(self.arguments)
        self.result = QPlainTextEdit()
        self.result.setObjectName("toolCallResult")
        self.result.setReadOnly(True)
        layout.addWidget(self.result)
        self.more = QPushButton("Show all")
        self.more.setObjectName("toolCallMore")
        self.more.setFlat(True)
        self.more.setCheckable(True)
        self.more.toggled.connect(lambda _on: self._show_result())
        layout.addWidget(self.more, 0, Qt.AlignmentFlag.AlignLeft)
        self.call = call
        self.show_call(call)

    def show_call(self, call: dict) -> None:
        self.call = call
        took = f" · {call['duration'] * 1000:.0f} ms" if call.get("duration") is not None else ""
        where = f" on {call['server']}" if call.get("server") else ""
        self.header.setText(f"Tool {call['name']}{where} · {call['status']}{took}")
        self.arguments.setText(_pretty(call["arguments"]))
        self._show_result()

    def _show_result(self) -> None:
        text = self.call.get("result") or ""
        if self.call["status"] in ("error", "denied", "cancelled"):
            text = f"Error: {text}"
        long = len(text) > CARD_PREVIEW_CHARS
        self.more.setVisible(long)
        self.result.setVisible(bool(text))
        full = self.more.isChecked()
        shown = text if full or not long else text[:CARD_PREVIEW_CHARS] + " …"
        self.result.setPlainText(shown)
        # as tall as its lines (wrapped at about 100 characters), up to 5 folded or 20 open
        lines = sum(max(1, len(line) // 100 + 1) for line in shown.splitlines()) or 1
        height = self.result.fontMetrics().lineSpacing() * min(lines, 20 if full else 5) + 30
        self.result.setFixedHeight(height)
        self.more.setText("Show less" if full else "Show all")


class StepsView(QWidget):
    """An answer's steps above its text: notices, thinking, then one card per call."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setSpacing(4)
        self.added = _plain_label("", "Muted")  # what the request's preparers added: documents, tools...
        self.added.hide()
        self.layout_.addWidget(self.added)
        self.thinking = ThinkingSection()
        self.layout_.addWidget(self.thinking)
        self.cards: list[ToolCallCard] = []
        self.notices: list[QLabel] = []
        self.hide()

    def show_steps(self, steps: AnswerSteps | None) -> None:
        if steps is None or steps.empty:
            self.hide()
            return
        self.show()
        self.added.setText(" · ".join(steps.added))
        self.added.setVisible(bool(steps.added))
        self.thinking.show_steps(steps)
        for i, call in enumerate(steps.calls):
            if i < len(self.cards):
                self.cards[i].show_call(call)
            else:
                card = ToolCallCard(call)
                self.cards.append(card)
                self.layout_.addWidget(card)
        for text in steps.notices[len(self.notices) :]:
            label = _plain_label(text, "Notice")
            label.setObjectName("agentNotice")
            self.notices.append(label)
            self.layout_.addWidget(label)


class ApprovalDialog(QDialog):
    """Allow once / Always allow this tool / Deny, for one call."""

    decided = Signal(object)  # Decision

    def __init__(self, server: str, tool: str, arguments: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("approvalDialog")
        self.setWindowTitle("Allow this tool call?")
        layout = QVBoxLayout(self)
        layout.addWidget(_plain_label(f"The model wants to run {tool} from the MCP server {server} with:"))
        args = QPlainTextEdit(_pretty(arguments))
        args.setReadOnly(True)
        args.setMaximumHeight(120)
        layout.addWidget(args)
        row = QHBoxLayout()
        self.deny = QPushButton("Deny")
        self.always = QPushButton("Always allow this tool")
        self.once = QPushButton("Allow once")
        self.once.setDefault(True)
        for button, decision in ((self.deny, Decision.DENY), (self.always, Decision.ALWAYS), (self.once, Decision.ONCE)):
            button.clicked.connect(lambda _c=False, d=decision: self._decide(d))
            row.addWidget(button)
        layout.addLayout(row)
        self._decision: Decision | None = None
        self.rejected.connect(lambda: self._decide(Decision.DENY))

    def _decide(self, decision: Decision) -> None:
        if self._decision is None:
            self._decision = decision
            self.decided.emit(decision)
            self.accept()


__all__ = ["ApprovalDialog", "StepsView", "ThinkingSection", "ToolCallCard"]
