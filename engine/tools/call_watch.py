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

    __slots__ = ("trigger", "open", "close", "thinking", "tail", "keep", "fired", "recent", "opened_tokens", "lead")

    def __init__(self, trigger: str, think_tags: tuple[str, str] | None = None, *, thinking: bool = False) -> None:
        if not trigger:
            raise ValueError("a call watch needs the text calls open with")
        self.trigger = trigger.encode()
        self.open, self.close = (t.encode() for t in think_tags) if think_tags else (b"", b"")
        self.thinking = thinking and bool(self.close)
        self.keep = max(len(self.trigger), len(self.open), len(self.close)) - 1
        self.tail = b""
        self.fired = False
        self.recent: list[tuple[int, bytes]] = []  # the tokens whose text holds the tail (and this one), oldest first
        # Once fired: the tokens from the one the opening starts in, and that token's text before the opening.
        self.opened_tokens: list[int] = []
        self.lead = b""

    def feed(self, piece: bytes, token: int = -1) -> bytes | None:
        """Take one token (its text, and its id); the text from the call's opening through this token once it is
        written, else None. The tokens that wrote it are then :attr:`opened_tokens`, the first of which may hold
        :attr:`lead`, text before the opening.

        After that the watch is spent: it answers None.
        """
        if self.fired:
            return None
        self.recent.append((token, piece))
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
                self._opened(len(buf) - call)
                self.fired, self.tail, self.recent = True, b"", []
                return buf[call:]
            break
        self.tail = buf[max(at, len(buf) - self.keep) :] if self.keep else b""
        held = sum(len(p) for _, p in self.recent)
        while self.recent and held - len(self.recent[0][1]) >= len(self.tail):  # wholly before the tail
            held -= len(self.recent.pop(0)[1])
        return None

    def _opened(self, n: int) -> None:
        """Find the tokens that wrote the last ``n`` bytes: the first of them may start before those bytes."""
        total = 0
        for i in range(len(self.recent) - 1, -1, -1):
            total += len(self.recent[i][1])
            if total >= n:
                self.opened_tokens = [t for t, _ in self.recent[i:]]
                self.lead = self.recent[i][1][: total - n]
                return


class ThinkEndWatch:
    """Watches an answer that starts inside its thinking (the prompt opened it) for the thinking's end: a grammar
    (a response format, a forced call) holds the answer from there, and the thinking before it stays free, as
    vLLM holds structured output only after the reasoning. It has :class:`CallWatch`'s interface: once fired it
    gives no text and no tokens to start the grammar on (what the closing tag's token wrote after it is left free).

    Args:
        close: The tag that ends the thinking.
    """

    __slots__ = ("close", "tail", "fired", "opened_tokens", "lead")

    def __init__(self, close: str) -> None:
        if not close:
            raise ValueError("a thinking watch needs the tag that ends the thinking")
        self.close = close.encode()
        self.tail = b""
        self.fired = False
        self.opened_tokens: list[int] = []
        self.lead = b""

    def feed(self, piece: bytes, token: int = -1) -> bytes | None:
        """Take one token's text; ``b""`` once the thinking has ended (with this token), else None. Spent after."""
        if self.fired:
            return None
        buf = self.tail + piece
        if self.close in buf:
            self.fired, self.tail = True, b""
            return b""
        self.tail = buf[-(len(self.close) - 1) :] if len(self.close) > 1 else b""
        return None


__all__ = ["CallWatch", "ThinkEndWatch"]
