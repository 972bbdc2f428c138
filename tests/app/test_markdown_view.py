"""Answers render as Markdown: highlighted code blocks with a Copy button, updated block by block; a long unbroken
string wraps anywhere, in questions and answers alike, and copies as it was written."""

from __future__ import annotations

from datetime import datetime

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QTextDocumentFragment
from PySide6.QtTest import QTest

from app.store.records import MessageRecord
from app.theme import DARK, LIGHT
from app.widgets.markdown import render_blocks
from app.widgets.markdown_view import CodeBlock, MarkdownView
from app.widgets.message_bubble import MessageBubble

ANSWER = "Here is **one** way:\n\n```python\ndef reverse(s):\n    return s[::-1]\n```\n\nIt slices <b>backwards</b>."


def test_code_blocks_are_highlighted_and_html_in_the_text_is_escaped():
    blocks = render_blocks(ANSWER, LIGHT)
    assert [b.kind for b in blocks] == ["text", "code", "text"]
    assert "<strong>one</strong>" in blocks[0].html
    code = blocks[1]
    assert code.language == "python" and code.code == "def reverse(s):\n    return s[::-1]"
    assert '<span style="color: #008000; font-weight: bold">def</span>' in code.html  # Pygments' keyword colour
    assert "&lt;b&gt;backwards&lt;/b&gt;" in blocks[2].html
    assert render_blocks(ANSWER, DARK)[1].html != code.html  # the dark theme highlights differently


def test_the_copy_button_puts_the_code_on_the_clipboard(qtbot):
    view = MarkdownView(LIGHT)
    qtbot.addWidget(view)
    view.set_markdown(ANSWER)
    (block,) = view.code_blocks()
    block.copy_button.click()
    assert QGuiApplication.clipboard().text() == "def reverse(s):\n    return s[::-1]"
    assert block.copy_button.text() == "Copied"


def test_streaming_text_updates_only_the_last_block(qtbot):
    view = MarkdownView(LIGHT)
    qtbot.addWidget(view)
    view.set_markdown(ANSWER)
    first, code, last = view.blocks
    view.set_markdown(ANSWER + " And it is fast")
    assert view.blocks[0] is first and view.blocks[1] is code and view.blocks[2] is last
    assert "fast" in last.text()
    view.set_markdown(ANSWER + "\n\n```\nmore")
    assert len(view.blocks) == 4 and isinstance(view.blocks[3], CodeBlock)
    assert view.blocks[:3] == [first, code, last]


LONG_URL = "https://example.com/" + "a" * 250


def _lines(label, width: int) -> int:
    return label.heightForWidth(width) // label.fontMetrics().lineSpacing()


def test_a_long_unbroken_string_wraps_in_questions_and_answers_instead_of_being_cut_off(qtbot):
    question = MessageBubble(MessageRecord(1, 1, "user", LONG_URL, datetime.now()), LIGHT)
    answer = MarkdownView(LIGHT)
    for widget in (question, answer):
        qtbot.addWidget(widget)
    answer.set_markdown(f"See {LONG_URL} and [the docs](https://example.com/{'b' * 60}).")
    (text,) = answer.blocks
    for label in (question.body, text):
        wanted = label.fontMetrics().horizontalAdvance(LONG_URL) // 300
        assert _lines(label, 300) >= wanted  # broken across as many lines as it takes
    assert f'href="https://example.com/{"b" * 60}"' in text.text()  # the link itself is whole


def test_what_is_copied_is_the_text_without_break_opportunities(qtbot):
    question = MessageBubble(MessageRecord(1, 1, "user", LONG_URL, datetime.now()), LIGHT)
    answer = MarkdownView(LIGHT)
    for widget in (question, answer):
        qtbot.addWidget(widget)
    answer.set_markdown(LONG_URL)
    assert answer.text() == LONG_URL
    for widget in (question, answer):
        widget.show()
    for label in (question.body, answer.blocks[0]):
        label.setSelection(0, len(QTextDocumentFragment.fromHtml(label.text()).toPlainText().strip()))  # all of it
        QGuiApplication.clipboard().clear()
        QTest.keyClick(label, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
        assert QGuiApplication.clipboard().text() == LONG_URL
    question.copy_button.click()
    assert QGuiApplication.clipboard().text() == LONG_URL
