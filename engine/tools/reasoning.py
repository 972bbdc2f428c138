"""Splitting a thinking model's output into its reasoning and its answer, as the text streams in.

Thinking models write ``<think>...</think>`` (Qwen3, DeepSeek-R1 and its distills, QwQ) or
``[THINK]...[/THINK]`` (Magistral) before the answer. Some templates open the section themselves
at the end of the prompt (the model then writes only the closing tag), so a splitter can start
inside it. Tags split across pieces (``</th`` + ``ink>``) are held back until decided.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_TAGS: tuple[tuple[str, str], ...] = (("<think>", "</think>"), ("[THINK]", "[/THINK]"))


@dataclass(frozen=True, slots=True)
class ReasoningPiece:
    """One piece of output, split: ``reasoning`` (thinking) and ``content`` (the answer)."""

    reasoning: str = ""
    content: str = ""


def _held(buf: str, marker: str) -> int:
    for k in range(min(len(marker) - 1, len(buf)), 0, -1):
        if buf.endswith(marker[:k]):
            return k
    return 0


class ReasoningSplitter:
    """Separates a leading thinking section from the answer.

    Args:
        tags: The opening and closing tag of the thinking section.
        started: True when the prompt already opened the section (the output starts inside it).
        enabled: False passes everything through as content.
    """

    def __init__(self, tags: tuple[str, str] = THINK_TAGS[0], *, started: bool = False, enabled: bool = True) -> None:
        self.open, self.close = tags
        self.enabled = enabled
        self._state = "thinking" if started and enabled else ("start" if enabled else "content")
        self._buf = ""

    @property
    def thinking(self) -> bool:
        """True while the output is inside the thinking section."""
        return self._state == "thinking"

    @property
    def undecided(self) -> bool:
        """True while the start of the output may still open a thinking section."""
        return self._state == "start"

    def feed(self, text: str) -> ReasoningPiece:
        if self._state == "content":
            return ReasoningPiece(content=text)
        self._buf += text
        return self._advance(final=False)

    def flush(self) -> ReasoningPiece:
        """What is held back when the output ends (unfinished thinking stays reasoning)."""
        if self._state == "content":
            return ReasoningPiece()
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> ReasoningPiece:
        reasoning, content = [], []
        while True:
            if self._state == "start":
                stripped = self._buf.lstrip()
                if stripped.startswith(self.open):
                    self._buf = stripped[len(self.open) :]
                    self._state = "thinking"
                    continue
                if not final and (not stripped or self.open.startswith(stripped)):
                    break  # nothing yet, or the opening tag in the making
                self._state = "content"
                content.append(self._buf)
                self._buf = ""
                break
            if self._state == "thinking":
                j = self._buf.find(self.close)
                if j == -1:
                    hold = 0 if final else _held(self._buf, self.close)
                    reasoning.append(self._buf[: len(self._buf) - hold])
                    self._buf = self._buf[len(self._buf) - hold :]
                    break
                reasoning.append(self._buf[:j])
                self._buf = self._buf[j + len(self.close) :]
                self._state = "after"
                continue
            if self._state == "after":  # drop the blank lines between the thinking and the answer
                stripped = self._buf.lstrip()
                if not stripped and not final:
                    self._buf = ""
                    break
                self._state = "content"
                content.append(stripped)
                self._buf = ""
                break
            break
        return ReasoningPiece("".join(reasoning), "".join(content))


def template_thinks(source: str) -> bool:
    """Whether a chat template (its source) can think: it has a thinking switch, writes a thinking tag, or
    writes harmony's analysis channel (gpt-oss), or Seed-OSS's or Cohere's thinking tag."""
    return any(t in source for t in ("enable_thinking", "<|channel|>", "<seed:think>", "<|START_THINKING|>",
                                     *(t for t, _ in THINK_TAGS)))  # fmt: skip


def split_reasoning(text: str, tags: tuple[str, str] = THINK_TAGS[0], *, started: bool = False) -> ReasoningPiece:
    """A whole answer split into its reasoning and its content."""
    s = ReasoningSplitter(tags, started=started)
    a, b = s.feed(text), s.flush()
    return ReasoningPiece(a.reasoning + b.reasoning, a.content + b.content)


def strip_reasoning(text: str, tags: tuple[str, str] = THINK_TAGS[0]) -> str:
    """``text`` without a leading thinking section (for earlier turns sent back to a model)."""
    if tags[1] in text:
        return text.split(tags[1])[-1].lstrip()
    return split_reasoning(text, tags).content if tags[0] in text else text


__all__ = ["THINK_TAGS", "ReasoningPiece", "ReasoningSplitter", "split_reasoning", "strip_reasoning", "template_thinks"]
