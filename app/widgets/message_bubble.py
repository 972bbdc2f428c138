"""MessageBubble: one message in the chat view, with its actions and, for answers, its stats.

User messages sit in a tinted bubble on the right and can be edited and sent again; answers use
the full column, render Markdown with highlighted code (each block with a Copy link), and show
tokens/s, time to first token and token count underneath.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QGuiApplication, QIcon, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.icons import icon
from app.store.images import ImageRef
from app.store.records import AnswerStats, MessageRecord
from app.theme import ThemeColors
from app.units import counted
from app.widgets.markdown import breakable_text
from app.widgets.markdown_view import MarkdownView, TextLabel

CURSOR = " ▍"
THUMB = 96  # a message's picture thumbnails, in pixels


STOPPED_EMPTY = "Stopped before any answer"
DRAFTED_TIP = ("Drafted: the share of the answer's tokens guessed ahead (speculative decoding) and kept because the "
               "model agreed. The answer is the one the model gives without it; it only came faster.")  # fmt: skip


def stats_text(stats: AnswerStats | None, streaming: bool, content: str | None = None, waiting: str = "") -> str:
    """The line under an answer: its numbers, or what happened to it (``content``: the answer's text, when
    known, says whether it was stopped before anything came); while it streams, what it waits for, if anything."""
    if streaming:
        return waiting or "Generating…"
    if stats is None:
        return ""
    if stats.finish_reason == "cancelled" and content == "" and not stats.tokens:
        return STOPPED_EMPTY
    parts = []
    if stats.tokens_per_second:
        parts.append(f"{stats.tokens_per_second:.1f} tok/s")
    if stats.tokens:
        parts.append(counted(stats.tokens, "token"))
        if stats.accepted_draft_tokens:
            parts.append(f"{round(100 * stats.accepted_draft_tokens / stats.tokens)}% drafted")
    if stats.ttft is not None:
        parts.append(f"first token {stats.ttft * 1000:.0f} ms")
    if stats.finish_reason == "cancelled":
        parts.append("stopped")
    elif stats.finish_reason == "length":
        parts.append("hit the token limit")
    return " · ".join(parts)


def _tool(name: str, tip: str, colors: ThemeColors, object_name: str) -> QToolButton:
    button = QToolButton()
    button.setObjectName(object_name)
    button.setIcon(icon(name, colors.muted))
    button.setIconSize(QSize(16, 16))
    button.setToolTip(tip)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    return button


class StatsLabel(QLabel):
    """The numbers under an answer: on one line where it fits, wrapped where the column is narrow."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("Muted")
        self.setWordWrap(True)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self.text()) + margins.left() + margins.right() + 2
        return QSize(width, super().sizeHint().height())


class PictureDialog(QDialog):
    """A picture of a message at full size (scrolled when larger than the screen)."""

    def __init__(self, path: Path, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pictureDialog")
        self.setWindowTitle(title)
        layout = QVBoxLayout(self)
        self.image = QLabel()
        pixmap = QPixmap(str(path))
        if pixmap.isNull():
            self.image.setText("This picture's file is gone from the data folder.")
        else:
            self.image.setPixmap(pixmap)
        scroll = QScrollArea()
        scroll.setWidget(self.image)
        scroll.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(scroll)
        screen = self.screen().availableGeometry() if self.screen() is not None else None
        width, height = pixmap.width() + 40, pixmap.height() + 40
        if screen is not None:
            width, height = min(width, screen.width() * 9 // 10), min(height, screen.height() * 9 // 10)
        self.resize(max(width, 240), max(height, 160))


class MessageBubble(QWidget):
    """Shows one :class:`MessageRecord`; call :meth:`show_message` whenever it changes."""

    edit_submitted = Signal(int, str)  # message id, new text
    regenerate_clicked = Signal()
    continue_clicked = Signal()  # the last answer, cut off at its token limit, is to go on
    branch_step = Signal(int, int)  # message id, -1 (the version before) or +1 (the one after)
    fork_clicked = Signal(int)  # message id: a new chat up to here

    def __init__(
        self,
        message: MessageRecord,
        colors: ThemeColors,
        parent: QWidget | None = None,
        *,
        picture_path: Callable[[ImageRef], Path] | None = None,
    ) -> None:
        super().__init__(parent)
        self.message = message
        self.colors = colors
        self.picture_path = picture_path  # where a picture of the message is kept
        self.picture_dialog: PictureDialog | None = None
        self.streaming = False
        self.waiting = ""
        self._last = False
        self._build()

    def _build(self) -> None:
        user = self.message.role == "user"
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 6, 0, 6)
        column = QVBoxLayout()
        column.setSpacing(4)
        self.frame = QFrame()
        self.frame.setObjectName("UserBubble" if user else "AnswerBubble")
        inner = QVBoxLayout(self.frame)
        inner.setContentsMargins(14, 10, 14, 10) if user else inner.setContentsMargins(2, 0, 2, 0)
        inner.setSpacing(6)
        self.notice = QLabel()
        self.notice.setObjectName("Notice")
        self.notice.hide()
        inner.addWidget(self.notice, 0, Qt.AlignmentFlag.AlignLeft)
        self.pictures: list[QToolButton] = []  # a thumbnail per picture attached; a click opens it
        if message_pictures := (self.message.images if self.picture_path is not None else ()):
            row = QHBoxLayout()
            row.setSpacing(6)
            for ref in message_pictures:
                row.addWidget(self._picture_button(ref))
            row.addStretch()
            inner.addLayout(row)
        if user:
            self.body = TextLabel()
            self.body.setWordWrap(True)
            self.body.setTextFormat(Qt.TextFormat.PlainText)
            self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.body.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        else:
            from app.agent.widgets import StepsView

            self.steps = StepsView()  # thinking and tool calls, above the answer
            inner.addWidget(self.steps)
            self.body = MarkdownView(self.colors)
        inner.addWidget(self.body)
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("messageEditor")
        self.editor.hide()
        inner.addWidget(self.editor)
        self.edit_buttons = QWidget()
        eb = QHBoxLayout(self.edit_buttons)
        eb.setContentsMargins(0, 0, 0, 0)
        eb.addStretch()
        self.cancel_edit = QPushButton("Cancel")
        self.send_edit = QPushButton("Send")
        self.send_edit.setObjectName("sendEditButton")
        self.send_edit.setProperty("primary", True)
        eb.addWidget(self.cancel_edit)
        eb.addWidget(self.send_edit)
        self.edit_buttons.hide()
        inner.addWidget(self.edit_buttons)
        self.cancel_edit.clicked.connect(lambda: self.set_editing(False))
        self.send_edit.clicked.connect(self._submit_edit)
        column.addWidget(self.frame)

        footer = QHBoxLayout()
        footer.setSpacing(2)
        self.stats = StatsLabel()  # in a narrow column the numbers wrap; the buttons beside them stay in view
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.hide()
        self.copy_button = _tool("copy", "Copy the message", self.colors, "copyButton")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.message.content))
        self.edit_button = _tool("edit", "Edit and send again", self.colors, "editButton")
        self.edit_button.clicked.connect(lambda: self.set_editing(True))
        self.regenerate_button = _tool("regenerate", "Answer again", self.colors, "regenerateButton")
        self.regenerate_button.clicked.connect(self.regenerate_clicked)
        self.continue_button = QPushButton("Continue")
        self.continue_button.setObjectName("continueButton")
        self.continue_button.setToolTip("The answer stopped at its token limit: let the model go on with it")
        self.continue_button.clicked.connect(self.continue_clicked)
        self.continue_button.hide()
        self.fork_button = _tool("fork", "Fork chat from here: a new chat with the conversation up to this message",
                                 self.colors, "forkButton")  # fmt: skip
        self.fork_button.clicked.connect(lambda: self.fork_clicked.emit(self.message.id))
        self.branch = QWidget()  # ‹ 2/3 ›: the versions of this message (edits, regenerations)
        self.branch.setObjectName("branchSwitcher")
        row = QHBoxLayout(self.branch)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        self.previous_branch = QToolButton()
        self.previous_branch.setObjectName("previousBranch")
        self.previous_branch.setText("‹")
        self.previous_branch.setToolTip("The version before")
        self.previous_branch.clicked.connect(lambda: self.branch_step.emit(self.message.id, -1))
        self.branch_label = QLabel()
        self.branch_label.setObjectName("Muted")
        self.next_branch = QToolButton()
        self.next_branch.setObjectName("nextBranch")
        self.next_branch.setText("›")
        self.next_branch.setToolTip("The version after")
        self.next_branch.clicked.connect(lambda: self.branch_step.emit(self.message.id, 1))
        for w in (self.previous_branch, self.branch_label, self.next_branch):
            row.addWidget(w)
        self.branch.hide()
        if user:
            footer.addStretch()
            footer.addWidget(self.branch)
            footer.addWidget(self.copy_button)
            footer.addWidget(self.edit_button)
            footer.addWidget(self.fork_button)
            self.regenerate_button.hide()
            self.stats.hide()
        else:
            footer.addWidget(self.branch)
            footer.addWidget(self.stats)
            footer.addSpacing(8)
            footer.addWidget(self.copy_button)
            footer.addWidget(self.regenerate_button)
            footer.addWidget(self.fork_button)
            footer.addSpacing(8)
            footer.addWidget(self.continue_button)
            footer.addStretch()
            self.edit_button.hide()
        column.addWidget(self.error)
        column.addLayout(footer)
        if user:
            outer.addStretch(1)
            outer.addLayout(column, 4)
        else:
            outer.addLayout(column)
        self.show_message(self.message, streaming=False)

    def _picture_button(self, ref: ImageRef) -> QToolButton:
        button = QToolButton()
        button.setObjectName("messagePicture")
        pixmap = QPixmap(str(self.picture_path(ref)))
        if not pixmap.isNull():
            button.setIcon(QIcon(pixmap.scaled(QSize(THUMB, THUMB), Qt.AspectRatioMode.KeepAspectRatio,
                                               Qt.TransformationMode.SmoothTransformation)))  # fmt: skip
        button.setIconSize(QSize(THUMB, THUMB))
        button.setToolTip(f"{ref.name or 'Picture'} ({ref.width}×{ref.height}); click to open it at full size")
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.clicked.connect(lambda _c=False, r=ref: self.open_picture(r))
        self.pictures.append(button)
        return button

    def open_picture(self, ref: ImageRef) -> PictureDialog:
        dialog = PictureDialog(self.picture_path(ref), ref.name or "Picture", self.window())
        self.picture_dialog = dialog
        dialog.open()
        return dialog

    # -- showing ------------------------------------------------------------------------------
    def show_message(self, message: MessageRecord, *, streaming: bool, waiting: str = "") -> None:
        """Show ``message``; a streaming one says ``waiting`` (its model loading) in place of "Generating…"."""
        self.message = message
        self.streaming = streaming
        self.waiting = waiting
        if message.role == "user":
            self.body.setText(breakable_text(message.content))
        else:
            self.body.set_markdown(message.content + CURSOR if streaming else message.content)
        stats = message.stats
        self.stats.setText(stats_text(stats, streaming, message.content, waiting))
        self.stats.setToolTip(DRAFTED_TIP if stats is not None and stats.accepted_draft_tokens and not streaming else "")
        dropped = stats.dropped_messages if stats else 0
        self.notice.setVisible(bool(dropped))
        if dropped:
            noun = "message" if dropped == 1 else "messages"
            self.notice.setText(f"{dropped} earlier {noun} left out to fit the context")
        failed = stats is not None and stats.finish_reason == "error" and not streaming
        self.error.setVisible(failed)
        if failed:
            self.error.setText(f'<span style="color:{self.colors.error_text};">{stats.error or "The answer failed."}</span>')
        self._show_tools()

    def _show_tools(self) -> None:
        """An answer that is still streaming has no copy, regenerate or fork yet; one with no text no copy."""
        if self.message.role == "user":
            return
        self.copy_button.setVisible(not self.streaming and bool(self.message.content))
        self.fork_button.setVisible(not self.streaming)
        self.regenerate_button.setVisible(self.message.role == "assistant" and self._last and not self.streaming)
        cut_off = self.message.stats is not None and self.message.stats.finish_reason == "length"
        self.continue_button.setVisible(self.message.role == "assistant" and self._last and not self.streaming and cut_off)

    def show_steps(self, steps) -> None:
        """An answer's thinking and tool-call cards (app.agent.steps.AnswerSteps, or None)."""
        if self.message.role != "user":
            self.steps.show_steps(steps)

    def set_branch(self, index: int, count: int) -> None:
        """Show ‹ index/count › when the message has other versions."""
        self.branch.setVisible(count > 1)
        self.branch_label.setText(f"{index}/{count}")
        self.previous_branch.setEnabled(index > 1)
        self.next_branch.setEnabled(index < count)

    def set_last(self, last: bool) -> None:
        """Only the last answer can be regenerated (once it has ended)."""
        self._last = last
        self._show_tools()

    def set_actions_enabled(self, enabled: bool) -> None:
        self.regenerate_button.setEnabled(enabled and not self.streaming)
        self.continue_button.setEnabled(enabled and not self.streaming)
        self.edit_button.setEnabled(enabled)
        self.branch.setEnabled(enabled)
        self.fork_button.setEnabled(enabled and not self.streaming)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        buttons = ((self.copy_button, "copy"), (self.edit_button, "edit"), (self.regenerate_button, "regenerate"),
                   (self.fork_button, "fork"))  # fmt: skip
        for button, name in buttons:
            button.setIcon(icon(name, colors.muted))
        if isinstance(self.body, MarkdownView):
            self.body.set_colors(colors)
        self.show_message(self.message, streaming=self.streaming, waiting=self.waiting)

    # -- editing ------------------------------------------------------------------------------
    def set_editing(self, editing: bool) -> None:
        if editing:
            self.editor.setPlainText(self.message.content)
            self.editor.setFocus()
        self.body.setVisible(not editing)
        self.editor.setVisible(editing)
        self.edit_buttons.setVisible(editing)

    def _submit_edit(self) -> None:
        text = self.editor.toPlainText()
        if text.strip():
            self.set_editing(False)
            self.edit_submitted.emit(self.message.id, text)
