"""MarkdownView: an answer as a column of block widgets, updated block by block.

Text blocks are rich-text labels; code blocks are framed, highlighted, with a Copy button in
their header. :meth:`MarkdownView.set_markdown` keeps every block whose content did not change,
so a streaming answer re-lays out only its last block.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import (
    QClipboard,
    QContextMenuEvent,
    QDesktopServices,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QTextDocumentFragment,
)
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.icons import icon
from app.theme import ThemeColors
from app.widgets.markdown import ZWSP, MarkdownBlock, render_blocks, strip_breaks


class TextLabel(QLabel):
    """A selectable label whose text may hold break opportunities (``ZWSP``, see :func:`breakable_text`); what
    it copies (Ctrl+C, its context menu, the X11 selection) is the text without them."""

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        super().keyPressEvent(event)
        if event.matches(QKeySequence.StandardKey.Copy):
            self.clean_clipboard()

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 - Qt override
        super().contextMenuEvent(event)
        menu = QApplication.activePopupWidget()  # the standard menu, shown now (it copies once clicked)
        if isinstance(menu, QMenu):
            menu.triggered.connect(lambda _action: self.clean_clipboard())

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        super().mouseReleaseEvent(event)
        self.clean_clipboard(QClipboard.Mode.Selection)

    @staticmethod
    def clean_clipboard(mode: QClipboard.Mode = QClipboard.Mode.Clipboard) -> None:
        clipboard = QGuiApplication.clipboard()
        text = clipboard.text(mode)
        if ZWSP in text:
            clipboard.setText(strip_breaks(text), mode)


def _label(rich: bool = True) -> QLabel:
    label = TextLabel()
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.RichText if rich else Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.linkActivated.connect(lambda href: QDesktopServices.openUrl(QUrl(href)))
    return label


class CodeScroll(QScrollArea):
    """The code of a code block, unwrapped: a line wider than the block scrolls sideways inside it, and the
    block never asks the chat column for more width than the column has. Its height is the code's, plus the
    scroll bar when one shows."""

    def __init__(self, code: QLabel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("CodeScroll")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setWidget(code)

    def _height(self, width: int) -> int:
        code = self.widget().sizeHint()
        bar = self.horizontalScrollBar().sizeHint().height() if code.width() > width else 0
        return code.height() + bar

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(self.widget().sizeHint().width(), self._height(self.width()))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(40, self._height(self.width()))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if self.height() != self._height(self.width()):
            self.updateGeometry()  # the scroll bar came or went


class CodeBlock(QFrame):
    """A code block: its language and a Copy button above the highlighted code."""

    copied = Signal(str)

    def __init__(self, block: MarkdownBlock, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("CodeBlock")
        self.block = block
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        header = QFrame()
        header.setObjectName("CodeHeader")
        row = QHBoxLayout(header)
        row.setContentsMargins(12, 3, 6, 3)
        self.language = QLabel()
        self.language.setObjectName("Muted")
        row.addWidget(self.language, 1)
        self.copy_button = QToolButton()
        self.copy_button.setObjectName("copyCodeButton")
        self.copy_button.setText("Copy")
        self.copy_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.copy_button.setIconSize(QSize(14, 14))
        self.copy_button.clicked.connect(self.copy)
        row.addWidget(self.copy_button)
        column.addWidget(header)
        self.code = _label()
        self.code.setWordWrap(False)
        self.code.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.code.setContentsMargins(12, 8, 12, 10)
        self.scroll = CodeScroll(self.code)
        column.addWidget(self.scroll)
        self.set_colors(colors)
        self.set_block(block)

    def set_block(self, block: MarkdownBlock) -> None:
        self.block = block
        self.language.setText(block.language or "code")
        self.code.setText(block.html)
        self.scroll.updateGeometry()

    def set_colors(self, colors: ThemeColors) -> None:
        self.copy_button.setIcon(icon("copy", colors.muted))

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.block.code)
        self.copy_button.setText("Copied")
        self.copied.emit(self.block.code)


class MarkdownView(QWidget):
    """Shows Markdown; call :meth:`set_markdown` as often as the text changes."""

    def __init__(self, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.colors = colors
        self.blocks: list[QWidget] = []
        self._column = QVBoxLayout(self)
        self._column.setContentsMargins(0, 0, 0, 0)
        self._column.setSpacing(8)

    def code_blocks(self) -> list[CodeBlock]:
        return [w for w in self.blocks if isinstance(w, CodeBlock)]

    def text(self) -> str:
        """What the blocks show, as plain text."""
        return "\n".join(
            w.block.code if isinstance(w, CodeBlock) else strip_breaks(QTextDocumentFragment.fromHtml(w.text()).toPlainText().strip())
            for w in self.blocks
        )

    def set_markdown(self, text: str) -> None:
        blocks = render_blocks(text, self.colors)
        for i, block in enumerate(blocks):
            if i < len(self.blocks):
                widget = self.blocks[i]
                if isinstance(widget, CodeBlock) == (block.kind == "code"):
                    if widget.property("html") != block.html:
                        self._update(widget, block)
                    continue
                self._drop(widget)
            widget = self._make(block)
            if i < len(self.blocks):
                self.blocks[i] = widget
            else:
                self.blocks.append(widget)
            self._column.insertWidget(i, widget)
        for widget in self.blocks[len(blocks) :]:
            self._drop(widget)
        del self.blocks[len(blocks) :]

    def _drop(self, widget: QWidget) -> None:
        self._column.removeWidget(widget)
        widget.hide()
        widget.deleteLater()

    def _make(self, block: MarkdownBlock) -> QWidget:
        widget = CodeBlock(block, self.colors) if block.kind == "code" else _label()
        self._update(widget, block)
        return widget

    @staticmethod
    def _update(widget: QWidget, block: MarkdownBlock) -> None:
        widget.setProperty("html", block.html)
        if isinstance(widget, CodeBlock):
            widget.set_block(block)
        else:
            widget.setText(block.html)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        for widget in self.blocks:
            self._drop(widget)
        self.blocks = []  # the caller sets the text again, rendered in the new colours
