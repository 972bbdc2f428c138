"""Retrieved passages into a prompt with numbered source markers, within a token budget, and the
citations of an answer back to files and places."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.documents.types import SearchHit

INSTRUCTIONS = (
    "Answer the user's question from the numbered sources below. After each statement, cite the source it "
    "comes from by its number in square brackets, like [1]. If the sources do not answer the question, say so."
)
_CITE = re.compile(r"\[(\d{1,3})(?:\s*,\s*(\d{1,3}))*\]")
_NUMS = re.compile(r"\d{1,3}")

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """About four characters a token: the budget's estimate where no tokenizer is at hand."""
    return max(1, len(text) // 4)


@dataclass(frozen=True, slots=True)
class Source:
    """One numbered passage given to the model, and where it came from."""

    number: int
    path: str
    page: int | None
    heading: str | None
    text: str
    score: float | None = None
    keyword_score: float | None = None
    vector_score: float | None = None

    @property
    def place(self) -> str:
        if self.page is not None:
            return f"page {self.page}" + (f", {self.heading}" if self.heading else "")
        return self.heading or ""

    @property
    def label(self) -> str:
        """ "[2] manual.pdf, page 3" """
        name = Path(self.path).name
        return _one_line(f"[{self.number}] {name}" + (f", {self.place}" if self.place else ""))

    @property
    def uri(self) -> str:
        """A file URI that opens the place: PDF viewers take #page=N."""
        uri = Path(self.path).as_uri()
        return f"{uri}#page={self.page}" if self.page is not None else uri

    def as_dict(self) -> dict:
        return {
            "number": self.number,
            "path": self.path,
            "page": self.page,
            "heading": self.heading,
            "place": self.place,
            "label": self.label,
            "uri": self.uri,
            "text": self.text,
            "score": self.score,
            "keyword_score": self.keyword_score,
            "vector_score": self.vector_score,
        }


@dataclass(frozen=True, slots=True)
class DocsContext:
    """The system message that carries the sources, the sources themselves, and whether whole
    documents went in (they were small enough) or only the best passages. POST /api/docs/context validates its
    answer from these attributes."""

    system: str
    sources: tuple[Source, ...]
    whole_documents: bool = False


def build_context(
    passages: Sequence[SearchHit],
    *,
    budget_tokens: int,
    count_tokens: TokenCounter = approx_tokens,
    whole_documents: bool = False,
) -> DocsContext:
    """Number ``passages`` in order and put as many as fit ``budget_tokens`` into one system message.

    A passage that would overflow the budget is left out (a shorter one after it may still go in).
    """
    parts = [INSTRUCTIONS]
    used = count_tokens(INSTRUCTIONS)
    sources: list[Source] = []
    for hit in passages:
        number = len(sources) + 1
        block = _block(number, hit)
        cost = count_tokens(block) + 2
        if used + cost > budget_tokens:
            continue
        used += cost
        parts.append(block)
        sources.append(
            Source(
                number=number,
                path=hit.path,
                page=hit.page,
                heading=hit.heading,
                text=hit.text,
                score=None if whole_documents else hit.score,
                keyword_score=hit.keyword_score,
                vector_score=hit.vector_score,
            )
        )
    if not sources:
        parts.append("(No source passage matched the question.)")
    return DocsContext(system="\n\n".join(parts), sources=tuple(sources), whole_documents=whole_documents)


def _block(number: int, hit: SearchHit) -> str:
    where = _one_line(Path(hit.path).name + (f", {hit.place}" if hit.place else ""))
    return f"[{number}] ({where})\n{hit.text}"


def _one_line(text: str) -> str:
    """``text`` with its line breaks and other control characters as spaces: a file's name or heading that holds
    one cannot start a line of its own in the prompt (a line that reads as another source's marker)."""
    return "".join(" " if ch < " " or "\x7f" <= ch <= "\x9f" or ch in "\u2028\u2029" else ch for ch in text)


def cited(answer: str, sources: Sequence[Source]) -> list[Source]:
    """The sources an answer cites with [n] markers, in the order first cited."""
    by_number = {s.number: s for s in sources}
    out: list[Source] = []
    for match in _CITE.finditer(answer):
        for n in _NUMS.findall(match.group(0)):
            source = by_number.get(int(n))
            if source is not None and source not in out:
                out.append(source)
    return out
