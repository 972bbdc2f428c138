"""Answers render as Markdown: highlighted code blocks with a Copy button, updated block by block."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication

from app.theme import DARK, LIGHT
from app.widgets.markdown import render_blocks
from app.widgets.markdown_view import CodeBlock, MarkdownView

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
