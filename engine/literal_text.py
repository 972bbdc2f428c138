"""Content that stays text: a special token's text (``<|im_end|>``, ``<|im_start|>``...) written in a message,
a document, a tool result or a tool's definition never becomes that token when the chat is tokenized.

A chat template renders messages into one string, and a prompt is tokenized with special tokens parsed, so that
the template's own markup becomes its control tokens. Parsed the same way, ``<|im_end|><|im_start|>system`` inside
a message would close the user's turn and open a system turn the client wrote. So the template renders each
special text found in its inputs as a placeholder (:class:`ContentGuard`); the output gets the texts back, their
places kept as literal spans (:class:`MarkedPrompt`), and :func:`encode_marked` tokenizes the text around each
span, up to the template's markup on either side, with special tokens left unparsed.
"""

from __future__ import annotations

import bisect
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from engine.errors import InvalidRequest

#: Tokenizes text without BOS: (text, whether special texts become their tokens) -> ids.
Encode = Callable[[str, bool], list[int]]

Span = tuple[int, int]


class SpecialTexts:
    """The texts a vocabulary reads as special tokens when it parses them, and a fast search for them.

    Vocabularies hold thousands of them (Gemma's ``<unused…>``): one alternation of them all costs a second per
    megabyte of prompt in Python's ``re``, so the pattern is a trie of their characters (milliseconds).
    """

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self.texts = frozenset(t for t in texts if t)

    def __bool__(self) -> bool:
        return bool(self.texts)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        trie: dict[str, Any] = {}
        for text in self.texts:
            node = trie
            for ch in text:
                node = node.setdefault(ch, {})
            node[""] = {}
        return re.compile(_trie_source(trie) or "(?!)")


def _trie_source(node: dict[str, Any]) -> str:
    alts = [re.escape(ch) + _trie_source(child) for ch, child in sorted(node.items()) if ch]
    if not alts:
        return ""
    if "" in node:  # a text ends here, and a longer one goes on: the longer is tried first (greedy)
        return "(?:" + "|".join(alts) + ")?"
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


@dataclass(frozen=True, slots=True)
class MarkedPrompt:
    """A rendered prompt and where in it content wrote special texts, which are tokenized as plain text."""

    text: str
    literal: tuple[Span, ...] = ()


class ContentGuard:
    """Special texts in a template's inputs swapped for placeholders, then swapped back in its output.

    The placeholder is letters and digits (it survives ``tojson`` and ``trim``) with a random part per render,
    so content cannot write one.
    """

    def __init__(self, specials: SpecialTexts) -> None:
        self.specials = specials
        self.nonce = secrets.token_hex(8)
        self.found: list[str] = []
        self._placeholder = re.compile(f"hearthlit{self.nonce}n([0-9]+)z")

    def protect(self, value: Any, depth: int = 0) -> Any:
        """``value`` (strings, lists, tuples, dicts of them) with every special text in it replaced.

        Raises:
            InvalidRequest: ``value`` nests deeper than :data:`MAX_TEMPLATE_DEPTH` (a template walking it would
                run out of stack).
        """
        if isinstance(value, str):
            if not self.specials or self.specials.pattern.search(value) is None:
                return value
            return self.specials.pattern.sub(self._swap, value)
        if isinstance(value, (dict, list, tuple)) and depth >= MAX_TEMPLATE_DEPTH:
            raise InvalidRequest(f"A value given to the chat template nests more than {MAX_TEMPLATE_DEPTH} levels deep; "
                                 "send a flatter one.")  # fmt: skip
        if isinstance(value, dict):
            return {self.protect(k, depth + 1): self.protect(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.protect(v, depth + 1) for v in value]
        return value

    def _swap(self, match: re.Match[str]) -> str:
        self.found.append(match.group(0))
        return f"hearthlit{self.nonce}n{len(self.found) - 1}z"

    def restore(self, rendered: str) -> MarkedPrompt:
        """The template's output with the special texts back, and their spans.

        Raises:
            InvalidRequest: the template changed a placeholder (cut it, changed its case), so a special text
                could not be put back where the content wrote it.
        """
        if not self.found:
            return MarkedPrompt(rendered)
        parts: list[str] = []
        spans: list[Span] = []
        pos = size = 0
        for m in self._placeholder.finditer(rendered):
            index = int(m.group(1))
            if index >= len(self.found):
                continue
            before = rendered[pos : m.start()]
            parts.append(before)
            size += len(before)
            text = self.found[index]
            parts.append(text)
            spans.append((size, size + len(text)))
            size += len(text)
            pos = m.end()
        parts.append(rendered[pos:])
        out = "".join(parts)
        if self.nonce in out.lower():
            raise InvalidRequest(
                f"The model's chat template changed a message's text around '{self.found[0]}', a control token of "
                "this model written in it; remove it from the message.",
                param="messages",
            )
        return MarkedPrompt(out, tuple(spans))


#: How deep a value given to a chat template may nest (messages, tools, arguments, template variables).
MAX_TEMPLATE_DEPTH = 128

#: Most special texts one parsed call to the tokenizer holds. llama.cpp's pass over special tokens is quadratic in
#: their number: a chat of 20,000 short messages took 5 s to tokenize in one call (33,000, half a minute, a thread
#: of the worker's pool held all along); in pieces of this many, it is linear.
SPECIALS_PER_CALL = 64


def special_pieces(text: str, specials: SpecialTexts, lstrip: frozenset[str] = frozenset(),
                   rstrip: frozenset[str] = frozenset()) -> list[str]:  # fmt: skip
    """``text`` in pieces of at most :data:`SPECIALS_PER_CALL` of ``specials`` (the texts the tokenizer makes
    tokens of) each, that tokenized one by one give the ids the whole text gives (one piece: the text).

    The tokenizer splits the text at each special text and tokenizes the runs between them on their own, so a
    cut between two special texts changes nothing but what a token that strips whitespace beside it
    (llama.cpp's ``lstrip``, ``rstrip``: ``lstrip`` and ``rstrip`` here) can reach: a piece is cut just before a
    special text that strips nothing on its left, else just after the one before it if that one strips nothing
    on its right, else not there.
    """
    if not specials:
        return [text]
    cuts: list[int] = []
    held, last_end, last_text = 0, 0, ""
    for m in specials.pattern.finditer(text):
        held += 1  # the special texts in the piece so far, this one's included
        if held > SPECIALS_PER_CALL:  # (so the one before it is in the piece too)
            at = m.start() if m.group() not in lstrip else last_end if last_text not in rstrip else 0
            if at > 0:
                cuts.append(at)
                held = 1
        last_end, last_text = m.end(), m.group()
    return [text[s:e] for s, e in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def encode_marked(text: str, literal: Iterable[Span], specials: SpecialTexts, encode: Encode) -> list[int]:
    """The token ids of a rendered prompt (no BOS), special texts parsed except in the ``literal`` spans.

    Each literal span is tokenized with the text around it up to the template's special tokens on either side,
    unparsed: that run is what the tokenizer splits the prompt into at those tokens anyway, so its words merge as
    they would without the span, and a prompt without literal spans gives the ids it always did.
    """
    spans = sorted(literal)
    if not spans:
        return encode(text, True)
    # the template's own special texts: those outside the literal spans
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for s, e in [*spans, (len(text), len(text))]:
        for m in specials.pattern.finditer(text, pos, s):
            starts.append(m.start())
            ends.append(m.end())
        pos = max(pos, e)
    runs: list[Span] = []
    for s, e in spans:
        left = ends[i - 1] if (i := bisect.bisect_right(ends, s)) > 0 else 0
        j = bisect.bisect_left(starts, e)
        right = starts[j] if j < len(starts) else len(text)
        if runs and left <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(runs[-1][1], right))
        else:
            runs.append((left, right))
    out: list[int] = []
    pos = 0
    for s, e in runs:
        if s > pos:
            out += encode(text[pos:s], True)
        out += encode(text[s:e], False)
        pos = e
    if pos < len(text):
        out += encode(text[pos:], True)
    return out


__all__ = ["SPECIALS_PER_CALL", "ContentGuard", "Encode", "MarkedPrompt", "SpecialTexts", "encode_marked", "special_pieces"]
