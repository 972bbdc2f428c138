"""ChatView: the messages of one chat as bubbles in a scrolling column, bound to a ConversationModel.

Row inserts and removals add and drop bubbles; ``dataChanged`` re-renders only the changed
rows, at most every 50 ms (longer when a render gets expensive, so rendering never takes more
than about a fifth of the GUI thread's time).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QModelIndex, Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.chat.conversation_model import ConversationModel
from app.store.images import ImageRef
from app.store.records import AnswerSteps
from app.theme import ThemeColors
from app.widgets.message_bubble import MessageBubble

RENDER_INTERVAL_MS = 50
MAX_RENDER_INTERVAL_MS = 300
RENDER_SHARE = 5  # wait this many times the last render's duration before the next
COLUMN_WIDTH = 860


class ChatView(QScrollArea):
    edit_submitted = Signal(int, str)
    regenerate_clicked = Signal()
    continue_clicked = Signal()  # the last answer, cut off at its token limit, is to go on
    branch_requested = Signal(int, int)  # message id, step (-1 or +1)
    fork_requested = Signal(int)  # message id

    def __init__(
        self,
        colors: ThemeColors,
        steps_source: Callable[[int], AnswerSteps | None] | None = None,
        parent: QWidget | None = None,
        *,
        picture_path: Callable[[ImageRef], Path] | None = None,
    ) -> None:
        super().__init__(parent)
        self.colors = colors
        self.picture_path = picture_path  # where the pictures of messages are kept
        self.steps_source = steps_source  # message id -> its steps (thinking, tool calls, what was added)
        self.model: ConversationModel | None = None
        self.bubbles: list[MessageBubble] = []
        self._dirty: set[int] = set()
        self._stick = True
        self._actions_enabled = True
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        canvas = QWidget()
        canvas.setObjectName("ChatCanvas")
        row = QHBoxLayout(canvas)
        row.setContentsMargins(24, 16, 24, 16)
        self.column = QWidget()
        self.column.setMaximumWidth(COLUMN_WIDTH)
        self.layout_ = QVBoxLayout(self.column)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setSpacing(4)
        self.empty = QLabel()
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setObjectName("Muted")
        self.empty.setWordWrap(True)
        self.layout_.addWidget(self.empty)
        self.layout_.addStretch(1)
        row.addStretch(0)
        row.addWidget(self.column, 1)
        row.addStretch(0)
        self.setWidget(canvas)
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render_dirty)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(lambda v: setattr(self, "_stick", v >= bar.maximum() - 24))
        bar.rangeChanged.connect(lambda _lo, hi: bar.setValue(hi) if self._stick else None)

    def set_empty_text(self, text: str) -> None:
        self.empty.setText(text)

    # -- binding ------------------------------------------------------------------------------
    def set_model(self, model: ConversationModel | None) -> None:
        if self.model is not None:
            self.model.rowsInserted.disconnect(self._inserted)
            self.model.rowsRemoved.disconnect(self._removed)
            self.model.dataChanged.disconnect(self._changed)
            self.model.modelReset.disconnect(self._rebuild)
        self.model = model
        if model is not None:
            model.rowsInserted.connect(self._inserted)
            model.rowsRemoved.connect(self._removed)
            model.dataChanged.connect(self._changed)
            model.modelReset.connect(self._rebuild)
        self._rebuild()

    def _rebuild(self) -> None:
        for bubble in self.bubbles:
            self._drop(bubble)
        self.bubbles = []
        self._dirty.clear()
        if self.model is not None and self.model.rowCount():
            self._inserted(QModelIndex(), 0, self.model.rowCount() - 1)
        self._after_change()
        self._stick = True

    def _drop(self, bubble: MessageBubble) -> None:
        """Take a bubble off the screen now (it is deleted once the event loop gets to it)."""
        self.layout_.removeWidget(bubble)
        bubble.hide()
        bubble.deleteLater()

    def _make(self, row: int) -> MessageBubble:
        message = self.model.message(row)
        bubble = MessageBubble(message, self.colors, self.column, picture_path=self.picture_path)
        bubble.show_message(message, streaming=self.model.is_streaming(message.id), waiting=self.model.waiting_text(message.id))
        if self.steps_source is not None and message.role == "assistant":
            bubble.show_steps(self.steps_source(message.id))
        bubble.set_branch(*self.model.branch_of(message.id))
        bubble.edit_submitted.connect(self.edit_submitted)
        bubble.regenerate_clicked.connect(self.regenerate_clicked)
        bubble.continue_clicked.connect(self.continue_clicked)
        bubble.branch_step.connect(self.branch_requested)
        bubble.fork_clicked.connect(self.fork_requested)
        return bubble

    def _inserted(self, _parent: QModelIndex, first: int, last: int) -> None:
        for row in range(first, last + 1):
            bubble = self._make(row)
            self.bubbles.insert(row, bubble)
            self.layout_.insertWidget(row + 1, bubble)  # after the empty-state label
        self._stick = True
        self._after_change()

    def _removed(self, _parent: QModelIndex, first: int, last: int) -> None:
        for bubble in self.bubbles[first : last + 1]:
            self._drop(bubble)
        del self.bubbles[first : last + 1]
        self._dirty = {r for r in self._dirty if r < first}
        self._after_change()

    def _changed(self, top: QModelIndex, bottom: QModelIndex, _roles=()) -> None:
        self._dirty.update(range(top.row(), bottom.row() + 1))
        finished = any(not self.model.is_streaming(self.model.message(r).id) for r in range(top.row(), bottom.row() + 1))
        if finished:
            self._render_dirty()  # the final text and the stats show at once
        elif not self._render_timer.isActive():
            self._render_timer.start()

    def _render_dirty(self) -> None:
        self._render_timer.stop()
        if self.model is None:
            return
        started = time.perf_counter()
        for row in sorted(self._dirty):
            if row < len(self.bubbles):
                message = self.model.message(row)
                self.bubbles[row].show_message(message, streaming=self.model.is_streaming(message.id),
                                               waiting=self.model.waiting_text(message.id))  # fmt: skip
                self.bubbles[row].set_branch(*self.model.branch_of(message.id))
        self._dirty.clear()
        self._after_change()
        spent_ms = (time.perf_counter() - started) * 1000
        interval = int(min(MAX_RENDER_INTERVAL_MS, max(RENDER_INTERVAL_MS, spent_ms * RENDER_SHARE)))
        self._render_timer.setInterval(interval)

    def _after_change(self) -> None:
        self.empty.setVisible(not self.bubbles)
        for i, bubble in enumerate(self.bubbles):
            bubble.set_last(i == len(self.bubbles) - 1)
            bubble.set_actions_enabled(self._actions_enabled)

    def refresh_steps(self, message_id: int) -> None:
        """Show an answer's thinking and tool calls again (they changed)."""
        if self.model is None or self.steps_source is None:
            return
        row = self.model.row_of(message_id)
        if 0 <= row < len(self.bubbles):
            self.bubbles[row].show_steps(self.steps_source(message_id))

    def set_actions_enabled(self, enabled: bool) -> None:
        """Edit and regenerate are off while this chat answers."""
        self._actions_enabled = enabled
        self._after_change()

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        for bubble in self.bubbles:
            bubble.set_colors(colors)
