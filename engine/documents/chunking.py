"""Sections to chunks along the document's structure: never across a page or heading, paragraphs kept whole
where they fit, long paragraphs cut at sentence ends."""

from __future__ import annotations

import re
from collections.abc import Iterable

from engine.documents.types import Chunk, Section

# About 250 tokens of English: small enough for a 512-token embedding model, big enough to hold an answer.
DEFAULT_MAX_CHARS = 1000
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")


def chunk_sections(sections: Iterable[Section], *, max_chars: int = DEFAULT_MAX_CHARS) -> list[Chunk]:
    """Pack each section's paragraphs into chunks of at most ``max_chars`` characters.

    A chunk never spans two sections, so it carries exactly one page and heading.
    """
    chunks: list[Chunk] = []
    for section in sections:
        for text in _pack(_pieces(section.text, max_chars), max_chars):
            chunks.append(Chunk(text=text, ordinal=len(chunks), page=section.page, heading=section.heading))
    return chunks


def _pieces(text: str, max_chars: int) -> list[str]:
    """Paragraphs, with any longer than ``max_chars`` cut at sentence ends (or, failing that, at spaces)."""
    out: list[str] = []
    for para in _PARAGRAPH.split(text):
        para = para.strip()
        if not para:
            continue
        if len(para) <= max_chars:
            out.append(para)
            continue
        for sentence in _SENTENCE_END.split(para):
            while len(sentence) > max_chars:
                cut = sentence.rfind(" ", 0, max_chars)
                cut = cut if cut > max_chars // 2 else max_chars
                out.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence:
                out.append(sentence)
    return out


def _pack(pieces: list[str], max_chars: int) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for piece in pieces:
        extra = len(piece) + (2 if current else 0)
        if current and size + extra > max_chars:
            chunks.append("\n\n".join(current))
            current, size = [], 0
            extra = len(piece)
        current.append(piece)
        size += extra
    if current:
        chunks.append("\n\n".join(current))
    return chunks
