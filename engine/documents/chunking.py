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
            out.extend(_cut(sentence, max_chars))
    return out


def _cut(sentence: str, max_chars: int) -> list[str]:
    """A sentence in pieces of at most ``max_chars`` characters, cut at the last space of each window.

    Each piece is sliced from its start position in the sentence, so a sentence of any length is read once;
    the rest of the sentence is never copied after each cut.
    """
    pieces: list[str] = []
    start, end = 0, len(sentence)
    while start < end:
        while start < end and sentence[start].isspace():
            start += 1
        if end - start <= max_chars:
            piece = sentence[start:end].strip()
            if piece:
                pieces.append(piece)
            break
        window = sentence[start : start + max_chars]
        cut = window.rfind(" ")
        cut = cut if cut > max_chars // 2 else max_chars
        piece = window[:cut].strip()
        if piece:
            pieces.append(piece)
        start += cut
    return pieces


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
