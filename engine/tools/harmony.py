"""gpt-oss's harmony format: an answer written as channels, read as thinking, answer and tool calls.

A harmony model answers in messages, each a header and a body::

    <|channel|>analysis<|message|>The user asks for the weather...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
    <|start|>assistant<|channel|>final<|message|>It is sunny.

(``<|call|>`` ends a call and ``<|return|>`` the answer: both end the generation, so they never reach the text.)
The ``analysis`` channel is thinking; ``final``, and ``commentary`` addressed to no one (a preamble to the user),
are the answer; a message addressed ``to=functions.NAME`` is a call of tool NAME with its body as arguments. Its
markers are control tokens that the vocabulary shows as text for these models, as llama.cpp does
(:mod:`engine.gguf.vocab`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from engine.tools.parsers import ParsedOutput, ToolCallDelta
from engine.tools.reasoning import ReasoningPiece
from engine.tools.spec import ToolCall, new_call_id

START, CHANNEL, MESSAGE, END, CONSTRAIN = (
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|constrain|>",
)
#: What closes a message's body (``<|call|>`` and ``<|return|>`` end the generation: they come only in a text
#: written whole, such as an earlier answer read back).
BODY_ENDS = (END, "<|call|>", "<|return|>")
_RECIPIENT = re.compile(r"\bto=(\S+)")


def is_harmony_template(source: str) -> bool:
    """Whether a chat template writes the harmony format (gpt-oss's)."""
    return CHANNEL in source and MESSAGE in source


def _held(buf: str, markers: tuple[str, ...]) -> int:
    """How many characters at ``buf``'s end could start one of ``markers``."""
    for k in range(min(max(len(m) for m in markers) - 1, len(buf)), 0, -1):
        tail = buf[-k:]
        if any(m.startswith(tail) for m in markers):
            return k
    return 0


class HarmonySplitter:
    """Splits a harmony answer as it streams into thinking, answer text and tool calls.

    The prompt ends in an assistant message's header (``<|start|>assistant``), so the output starts with the rest
    of one. Output with no harmony markup at its start (a grammar held it to JSON, say) is answer text.

    Args:
        tool_names: The tools offered; a message addressed to another recipient is answer text.
    """

    def __init__(self, tool_names: Collection[str] = ()) -> None:
        self.names = set(tool_names)
        self.calls: list[ToolCall] = []
        self._state = "start"  # start -> header -> body -> header ... | plain
        self._buf = ""
        self._kind = "content"  # what the body being read is: reasoning, content or call
        self._name = ""  # the tool a call's body calls
        self._header = ""
        self._cut = False  # the output ended at the token limit: a call being written is a call cut short

    @property
    def thinking(self) -> bool:
        """True while the output is inside an ``analysis`` message."""
        return self._state == "body" and self._kind == "reasoning"

    @property
    def undecided(self) -> bool:
        """True while the output is in a header (not yet known to be thinking or answer)."""
        return self._state in ("start", "header")

    def feed(self, text: str) -> tuple[ReasoningPiece, ParsedOutput]:
        self._buf += text
        return self._advance(final=False)

    def flush(self, *, cut: bool = False) -> tuple[ReasoningPiece, ParsedOutput]:
        """What is held back when the output ends: a call's body ends with it (``<|call|>`` ended the generation).
        ``cut``: the output ended at the token limit, so a call being written is reported with the arguments
        written so far."""
        self._cut = cut
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> tuple[ReasoningPiece, ParsedOutput]:
        reasoning: list[str] = []
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        while True:
            if self._state == "plain":
                content.append(self._buf)
                self._buf = ""
                break
            if self._state == "start":
                head = self._buf.lstrip()
                if not head and not final:
                    break
                if head.startswith((CHANNEL, START)) or _RECIPIENT.match(head.lstrip()):
                    self._state, self._header = "header", ""
                    continue
                if not final and (
                    CHANNEL.startswith(head) or START.startswith(head) or "to=".startswith(head.lstrip())
                ):
                    break  # a marker in the making
                self._state = "plain"
                continue
            if self._state == "header":
                at = self._buf.find(MESSAGE)
                if at == -1:
                    if final:  # the output ended in a header: nothing of it is text
                        self._buf = ""
                        break
                    break
                self._header += self._buf[:at]
                self._buf = self._buf[at + len(MESSAGE) :]
                self._open_body(self._header)
                self._state = "body"
                continue
            # body: up to the marker that closes it, or the end of the output
            first, marker = -1, ""
            for m in BODY_ENDS:
                i = self._buf.find(m)
                if i != -1 and (first == -1 or i < first):
                    first, marker = i, m
            if first == -1:
                if self._kind == "call":
                    if not final:
                        break
                    self._close_call(self._buf, content, deltas)
                    self._buf = ""
                    break
                hold = 0 if final else _held(self._buf, (*BODY_ENDS, START))
                (reasoning if self._kind == "reasoning" else content).append(
                    self._buf[: len(self._buf) - hold]
                )
                self._buf = self._buf[len(self._buf) - hold :]
                break
            body, self._buf = self._buf[:first], self._buf[first + len(marker) :]
            if self._kind == "call":
                self._close_call(body, content, deltas)
            else:
                (reasoning if self._kind == "reasoning" else content).append(body)
            # the next message's header follows (after <|start|> and its role)
            at = self._buf.find(START)
            self._buf = self._buf[at + len(START) :] if at != -1 else self._buf
            self._state, self._header = "header", ""
            if not self._buf:
                break
        return ReasoningPiece("".join(reasoning), ""), ParsedOutput("".join(content), tuple(deltas))

    def _open_body(self, header: str) -> None:
        channel = header.split(CHANNEL, 1)[1] if CHANNEL in header else ""
        channel = channel.split(CONSTRAIN, 1)[0].strip().split(" ", 1)[0].strip()
        to = _RECIPIENT.search(header)
        recipient = to.group(1).split(CHANNEL, 1)[0].split(CONSTRAIN, 1)[0] if to else ""
        if recipient:
            name = recipient.removeprefix("functions.")
            self._kind, self._name = "call", name
        elif channel == "analysis":
            self._kind = "reasoning"
        else:  # final, or commentary to the user
            self._kind = "content"

    def _close_call(self, body: str, content: list[str], deltas: list[ToolCallDelta]) -> None:
        args = body.strip() or "{}"
        try:
            json.loads(args)
            parsed = True
        except ValueError:
            parsed = False
        if self._name not in self.names or not (parsed or self._cut):
            content.append(body)  # a call of no offered tool, or no call at all: shown as it is
            return
        call = ToolCall(name=self._name, arguments=args, id=new_call_id())
        index = len(self.calls)
        self.calls.append(call)
        deltas.append(ToolCallDelta(index=index, id=call.id, name=call.name, arguments=""))
        deltas.append(ToolCallDelta(index=index, arguments=args))


__all__ = ["HarmonySplitter", "is_harmony_template"]
