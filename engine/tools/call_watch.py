"""Where a tool call the model chooses to make begins: the point from which a strict call's grammar holds.

Under ``tool_choice: auto`` the model may answer in text or call a tool. A backend samples freely and shows
each token's text to a :class:`CallWatch`; once the model writes the call's opening (``<tool_call>``) outside
its thinking, the watch gives back the text from that opening on, and the backend starts the call's grammar
on it (:func:`engine.tools.constraint.strict_call_constraint`). The watch keeps only a few bytes between
tokens, so an answer of any length costs the same per token.
"""

from __future__ import annotations


class CallWatch:
    """Watches an answer's text, token by token, for the opening of a tool call outside thinking.

    Args:
        trigger: The text a call opens with.
        think_tags: The tags around the model's thinking (a trigger between them is thought, not written).
        thinking: Whether the answer starts inside the thinking (the prompt opened it).
    """

    __slots__ = ("trigger", "open", "close", "thinking", "tail", "keep", "fired")

    def __init__(self, trigger: str, think_tags: tuple[str, str] | None = None, *, thinking: bool = False) -> None:
        if not trigger:
            raise ValueError("a call watch needs the text calls open with")
        self.trigger = trigger.encode()
        self.open, self.close = (t.encode() for t in think_tags) if think_tags else (b"", b"")
        self.thinking = thinking and bool(self.close)
        self.keep = max(len(self.trigger), len(self.open), len(self.close)) - 1
        self.tail = b""
        self.fired = False

    def feed(self, piece: bytes) -> bytes | None:
        """Take one token's text; the text from the call's opening through this token once it is written, else None.

        After that the watch is spent: it answers None.
        """
        if self.fired:
            return None
        buf = self.tail + piece
        at = 0
        while True:
            if self.thinking:
                end = buf.find(self.close, at)
                if end < 0:
                    break
                self.thinking, at = False, end + len(self.close)
                continue
            call = buf.find(self.trigger, at)
            think = buf.find(self.open, at) if self.open else -1
            if think >= 0 and (call < 0 or think < call):
                self.thinking, at = True, think + len(self.open)
                continue
            if call >= 0:
                self.fired, self.tail = True, b""
                return buf[call:]
            break
        self.tail = buf[max(at, len(buf) - self.keep) :] if self.keep else b""
        return None


__all__ = ["CallWatch"]
