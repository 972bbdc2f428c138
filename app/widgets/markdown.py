"""Markdown into blocks that QLabel can render: text blocks (HTML) and code blocks (highlighted).

An answer is split at its top-level blocks (paragraphs, lists, tables, code) so that while it
streams only the last block changes and only that block is laid out again. Raw HTML in the
text is escaped: a model's answer cannot inject markup.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from dataclasses import dataclass

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from app.theme import ThemeColors

MONO = "'DejaVu Sans Mono','Menlo','Consolas',monospace"
ZWSP = "\u200b"  # a break opportunity that shows nothing
LONG_RUN = 30  # a run of text without spaces longer than this can break between any two characters
_TAG = re.compile(r"(<[^>]*>)")
_UNIT = re.compile(r"&#?\w+;|.", re.DOTALL)  # a character of HTML text: an entity counts as one
_JOINERS = {"\u200d", "\u034f"}  # zero-width joiner, combining grapheme joiner


def _keeps_together(before: str, after: str) -> bool:
    """Whether no break may go between these two characters (a mark on its letter, a joined emoji)."""
    return (unicodedata.category(after) in ("Mn", "Me", "Mc", "Sk") or "\ufe00" <= after <= "\ufe0f"
            or "\U0001f3fb" <= after <= "\U0001f3ff" or before in _JOINERS or after in _JOINERS)  # fmt: skip


def _break_units(units: list[str]) -> str:
    """The units joined, with a break opportunity inside each run of more than LONG_RUN non-space units."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) > LONG_RUN:
            out.append(run[0])
            for before, after in zip(run, run[1:], strict=False):
                out.append(after if _keeps_together(before[-1], after[0]) else ZWSP + after)
        else:
            out.extend(run)
        run.clear()

    for unit in units:
        if unit.isspace() or (len(unit) > 1 and unit.startswith("<")):  # a space or a tag ends a run
            flush()
            out.append(unit)
        else:
            run.append(unit)
    flush()
    return "".join(out)


def breakable_text(text: str) -> str:
    """``text`` (plain) with a zero-width space between the characters of each run too long for a line
    (a long URL, a hash), so that word wrap can break it anywhere instead of cutting it off."""
    return _break_units(list(text))


def breakable_html(body: str) -> str:
    """:func:`breakable_text` on the text of ``body`` (HTML), never inside a tag or its attributes (an href)
    and never inside an entity."""
    units: list[str] = []
    for part in _TAG.split(body):
        units.extend([part] if part.startswith("<") else _UNIT.findall(part))
    return _break_units(units)


def strip_breaks(text: str) -> str:
    """``text`` without the break opportunities :func:`breakable_text` added (what a copy should hold)."""
    return text.replace(ZWSP, "")


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
            blocks.append(MarkdownBlock("text", breakable_html(_style(md.renderer.render(group, md.options, {}), colors))))
    return blocks
