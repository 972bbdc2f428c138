"""Markdown into blocks that QLabel can render: text blocks (HTML) and code blocks (highlighted).

An answer is split at its top-level blocks (paragraphs, lists, tables, code) so that while it
streams only the last block changes and only that block is laid out again. Raw HTML in the
text is escaped: a model's answer cannot inject markup.
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from app.theme import ThemeColors

MONO = "'DejaVu Sans Mono','Menlo','Consolas',monospace"


@dataclass(frozen=True, slots=True)
class MarkdownBlock:
    """One top-level block: ``kind`` "text" (``html`` for a QLabel) or "code" (``code`` and its
    ``language``, with ``html`` the highlighted ``<pre>``)."""

    kind: str
    html: str
    code: str = ""
    language: str = ""


@functools.cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])


@functools.lru_cache(maxsize=512)
def highlight_code(code: str, language: str, style: str) -> str:
    """HTML spans with inline colours (cached: a finished block is not highlighted again)."""
    try:
        lexer = get_lexer_by_name(language or "text")
    except ClassNotFound:
        return html.escape(code)
    formatter = HtmlFormatter(nowrap=True, noclasses=True, style=style)
    return highlight(code, lexer, formatter).rstrip("\n")


def code_html(code: str, language: str, colors: ThemeColors) -> str:
    body = highlight_code(code, language.lower(), colors.pygments_style) if code.strip() else ""
    return f'<pre style="margin:0; white-space:pre; font-family:{MONO}; font-size:9.5pt;">{body}</pre>'


def _style(body: str, c: ThemeColors) -> str:
    """Inline styles for what QLabel's HTML subset would otherwise draw plainly."""
    return (
        body.replace("<code>", f'<code style="background-color:{c.code_bg}; font-family:{MONO};">')
        .replace("<a href=", f'<a style="color:{c.accent};" href=')
        .replace("<table>", f'<table border="1" cellspacing="0" cellpadding="5" style="border-color:{c.border};">')
        .replace("<th>", f'<th bgcolor="{c.code_header}">')
    )


def _top_level_groups(tokens: list) -> list[list]:
    """Tokens grouped by top-level block (each group opens and closes at level 0)."""
    groups: list[list] = []
    depth = 0
    for token in tokens:
        if depth == 0:
            groups.append([])
        groups[-1].append(token)
        depth += token.nesting
    return groups


def render_blocks(text: str, colors: ThemeColors) -> list[MarkdownBlock]:
    """``text`` (Markdown) as a list of blocks, in order."""
    md = _parser()
    blocks: list[MarkdownBlock] = []
    for group in _top_level_groups(md.parse(text)):
        first = group[0]
        if first.type in ("fence", "code_block"):
            language = first.info.split()[0] if first.info else ""
            code = first.content.rstrip("\n")
            blocks.append(MarkdownBlock("code", code_html(code, language, colors), code=code, language=language))
        else:
            blocks.append(MarkdownBlock("text", _style(md.renderer.render(group, md.options, {}), colors)))
    return blocks
