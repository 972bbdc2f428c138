"""Markdown to the HTML subset QLabel renders, with Pygments-highlighted code blocks.

Each fenced code block gets a header with its language and a "Copy" link (``copy:N``); the
caller keeps the returned code texts to put on the clipboard. Raw HTML in the text is escaped:
a model's answer cannot inject markup.
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


@dataclass(frozen=True, slots=True)
class RenderedMarkdown:
    html: str
    code_blocks: tuple[str, ...]


@functools.cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])


@functools.lru_cache(maxsize=256)
def highlight_code(code: str, language: str, style: str) -> str:
    """HTML spans with inline colours (cached: a finished block is not highlighted again)."""
    try:
        lexer = get_lexer_by_name(language or "text")
    except ClassNotFound:
        return html.escape(code)
    formatter = HtmlFormatter(nowrap=True, noclasses=True, style=style)
    return highlight(code, lexer, formatter).rstrip("\n")


def _code_block(code: str, language: str, index: int, c: ThemeColors) -> str:
    body = highlight_code(code.rstrip("\n"), language.lower(), c.pygments_style) if code.strip() else ""
    label = html.escape(language or "code")
    return (
        f'<table width="100%" cellspacing="0" cellpadding="0" bgcolor="{c.code_bg}" '
        f'style="margin-top:6px; margin-bottom:6px; border-color:{c.border};" border="0">'
        f'<tr><td bgcolor="{c.code_header}" style="padding:4px 10px; color:{c.muted}; font-size:9pt;">{label}</td>'
        f'<td bgcolor="{c.code_header}" align="right" style="padding:4px 10px; font-size:9pt;">'
        f'<a href="copy:{index}" style="color:{c.accent}; text-decoration:none;">Copy</a></td></tr>'
        f'<tr><td colspan="2" style="padding:8px 10px;">'
        f'<pre style="margin:0; white-space:pre-wrap; font-family:\'DejaVu Sans Mono\',\'Menlo\',\'Consolas\',monospace; font-size:9.5pt;">{body}</pre>'
        f"</td></tr></table>"
    )


def render_markdown(text: str, colors: ThemeColors) -> RenderedMarkdown:
    """``text`` (Markdown) as QLabel-ready HTML plus the code of each fenced block."""
    md = _parser()
    tokens = md.parse(text)
    blocks: list[str] = []
    parts: list[str] = []
    pending: list = []

    def flush() -> None:
        if pending:
            parts.append(_style(md.renderer.render(pending, md.options, {}), colors))
            pending.clear()

    for token in tokens:
        if token.type in ("fence", "code_block") and token.level == 0:
            flush()
            language = token.info.split()[0] if token.info else ""
            parts.append(_code_block(token.content, language, len(blocks), colors))
            blocks.append(token.content.rstrip("\n"))
        else:
            pending.append(token)
    flush()
    return RenderedMarkdown(html="".join(parts), code_blocks=tuple(blocks))


def _style(body: str, c: ThemeColors) -> str:
    """Inline styles for what QLabel's HTML subset would otherwise draw plainly."""
    return (
        body.replace("<code>", f'<code style="background-color:{c.code_bg}; font-family:monospace;">')
        .replace("<a href=", f'<a style="color:{c.accent};" href=')
        .replace("<table>", f'<table border="1" cellspacing="0" cellpadding="5" style="border-color:{c.border};">')
        .replace("<th>", f'<th bgcolor="{c.code_header}">')
    )
