"""A chat stream split into thinking, answer and tool calls: what every backend's chat output passes through."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engine.tools.harmony import HarmonySplitter
from engine.tools.parsers import ParsedOutput, ToolCallDelta, ToolCallParser
from engine.tools.reasoning import ReasoningSplitter
from engine.tools.render import RenderedChat
from engine.tools.spec import ToolCall

if TYPE_CHECKING:
    from engine.types import GenerationChunk


@dataclass(frozen=True, slots=True)
class OutputPiece:
    """One piece of a chat answer, split: thinking, answer text, and tool-call deltas."""

    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()


class ChatOutputParser:
    """Reads a chat answer as it streams: thinking first (when the model thinks), then the answer,
    from which tool calls are taken when the request offered tools.

    Args:
        rendered: The rendered request (its tool format, tools and thinking tags).
    """

    def __init__(self, rendered: RenderedChat) -> None:
        self.splitter = ReasoningSplitter(rendered.think_tags, started=rendered.thinking_started)
        names = [t.name for t in rendered.tools]
        forced = rendered.constraint.tools if rendered.constraint is not None else ()
        # gpt-oss's channels: its thinking, answer and calls are messages of their own
        self.harmony = HarmonySplitter(names) if rendered.tool_format == "harmony" else None
        # a forced call is written in its grammar's markup (Hearth's generic one where the family's has no grammar)
        fmt = rendered.constraint.fmt if rendered.constraint is not None else rendered.tool_format
        self.tools = (
            ToolCallParser(fmt, names, forced=forced[0].name if len(forced) == 1 else None,
                           bare=rendered.bare_calls, calls_only=bool(forced),
                           schemas={t.name: t.parameters for t in rendered.tools})
            if names and (self.harmony is None or forced)
            else None
        )  # fmt: skip

    @property
    def thinking(self) -> bool:
        return self.harmony.thinking if self.harmony is not None else self.splitter.thinking

    @property
    def undecided(self) -> bool:
        return self.harmony.undecided if self.harmony is not None else self.splitter.undecided

    @property
    def repeated(self) -> bool:
        """Whether the answer made a call it had made already: it ends with the calls before that one."""
        return self.tools is not None and self.tools.repeated

    @property
    def calls(self) -> list[ToolCall]:
        made = self.harmony.calls if self.harmony is not None else []
        return made + (list(self.tools.calls) if self.tools is not None else [])

    def feed(self, text: str) -> OutputPiece:
        if self.harmony is not None:
            return self._answer(*self.harmony.feed(text), final=False)
        return self._answer(self.splitter.feed(text), final=False)

    def finish(self, *, cut: bool = False) -> OutputPiece:
        """What is still held back at the end; ``cut``: the answer ended at the token limit."""
        if self.harmony is not None:
            return self._answer(*self.harmony.flush(cut=cut), final=True, cut=cut)
        return self._answer(self.splitter.flush(), final=True, cut=cut)

    def _answer(self, piece, calls: ParsedOutput | None = None, *, final: bool, cut: bool = False) -> OutputPiece:
        """``piece`` (thinking and answer text) and ``calls`` (harmony's, with the answer text of its messages)
        with tool calls taken out of the answer text."""
        content = piece.content + (calls.content if calls is not None else "")
        made = calls.tool_calls if calls is not None else ()
        if self.tools is None:
            return OutputPiece(piece.reasoning, content, made)
        a = self.tools.feed(content) if content else None
        b = self.tools.finish(cut=cut) if final else None
        text = (a.content if a else "") + (b.content if b else "")
        deltas = made + (a.tool_calls if a else ()) + (b.tool_calls if b else ())
        return OutputPiece(piece.reasoning, text, deltas)


class ChatStreamParser:
    """A chat stream's chunks, one at a time, with thinking moved to ``reasoning`` and tool calls out of
    ``text``: each chunk fed gives its parsed chunk. The final chunk (the one with a finish_reason) carries
    every call in ``tool_calls`` (and ``finish_reason`` ``tool_calls`` when the answer stopped after making
    some; ``length`` with a call cut short, its arguments as written) and the count of thinking tokens.

    An answer that makes a call it made already ends there (:attr:`ending` turns true: its reader cancels the
    generation): nothing after it is given, and its final chunk says ``tool_calls``, however the generation ended.

    Args:
        rendered: The rendered request (its tool format, tools and thinking tags).
    """

    __slots__ = ("parser", "reasoning_tokens", "pending")

    @property
    def ending(self) -> bool:
        """Whether the answer has ended before its generation did (it repeated a call)."""
        return self.parser.repeated

    def __init__(self, rendered: RenderedChat) -> None:
        self.parser = ChatOutputParser(rendered)
        self.reasoning_tokens = 0
        self.pending = 0  # tokens of a possible opening tag, not yet decided

    def feed(self, chunk: GenerationChunk) -> GenerationChunk:
        parser = self.parser
        if parser.repeated:  # the answer has ended: what the generation still makes is not part of it
            chunk = replace(chunk, text="", logprobs=())
        thinking_before = parser.thinking
        piece = parser.feed(chunk.text)
        n = len(chunk.token_ids)
        if thinking_before:
            self.reasoning_tokens += n
        elif parser.thinking or piece.reasoning:
            self.reasoning_tokens += self.pending + n
            self.pending = 0
        elif parser.undecided:
            self.pending += n
        else:
            self.pending = 0
        if chunk.finish_reason is None:
            return replace(chunk, text=piece.content, reasoning=piece.reasoning, tool_call_deltas=piece.tool_calls)
        tail = parser.finish(cut=chunk.finish_reason == "length")  # a call cut short is still a call
        calls = tuple(parser.calls)
        finish = chunk.finish_reason
        if calls and (finish == "stop" or (parser.repeated and finish in ("length", "cancelled"))):
            finish = "tool_calls"
        return replace(
            chunk,
            text=piece.content + tail.content,
            reasoning=piece.reasoning + tail.reasoning,
            tool_call_deltas=piece.tool_calls + tail.tool_calls,
            tool_calls=calls,
            finish_reason=finish,
            reasoning_tokens=self.reasoning_tokens,
        )


def parse_stream(chunks: Iterator[GenerationChunk], rendered: RenderedChat) -> Iterator[GenerationChunk]:
    """A backend's chat stream parsed by :class:`ChatStreamParser`. Closing this iterator closes ``chunks``
    (which cancels the generation).
    """
    parser = ChatStreamParser(rendered)
    try:
        for chunk in chunks:
            out = parser.feed(chunk)
            yield out
            if out.finish_reason is not None:
                return
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


__all__ = ["OutputPiece", "ChatOutputParser", "ChatStreamParser", "parse_stream"]
