"""A cap on how many tokens a model may think: Anthropic's ``thinking.budget_tokens``, vLLM's
``thinking_token_budget`` and llama-server's ``thinking_budget_tokens``.

The model thinks freely until it has written ``budget`` tokens inside its thinking section; if the section is
still open then, the tokens of its closing tag are forced, one a step, and the answer goes on from there. Every
backend asks :meth:`ThinkingBudget.forced` before it samples a request's next token and shows it the token it
took (:meth:`ThinkingBudget.feed`), so the rule is the same on llama.cpp, the paged engine and MLX.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_CONTROL = re.compile(r"<\|[^|<>]{1,40}\|>")  # a control token's text, as harmony's <|end|>
# gpt-oss's thinking is its analysis channel: it ends with <|end|>, and the answer is the final channel's message
_HARMONY = ("<|channel|>analysis<|message|>", "<|end|>", "<|end|><|start|>assistant<|channel|>final<|message|>")


class ThinkingBudget:
    """One request's thinking, counted in tokens, and the closing tag's tokens once the count reaches the budget.

    The thinking is what :class:`~engine.tools.reasoning.ReasoningSplitter` reads as such: a section the prompt
    opened, or one the answer opens with its first text; an answer that starts with anything else has none, and a
    tag later in it is text.

    Args:
        budget: Tokens the thinking may take (0: closed at once, as soon as it opens).
        tags: The texts that open and close the thinking.
        closing: The tokens forced to close it (the closing tag's, or a harmony model's switch to its answer).
        piece: A token's bytes.
        started: The prompt opened the thinking (the answer starts inside it).
        shown: Bytes of tokens whose piece is empty (control tokens that write the tags).
        finish: The tokens that finish a closing tag of which the thinking's end already wrote the first bytes
            (called with those bytes' count); None forces the whole ``closing`` then.
    """

    __slots__ = ("budget", "open", "close", "closing", "piece", "shown", "finish", "state", "spent", "queue", "text")

    def __init__(
        self,
        budget: int,
        tags: tuple[str, str],
        closing: list[int],
        piece: Callable[[int], bytes],
        *,
        started: bool = False,
        shown: dict[int, bytes] | None = None,
        finish: Callable[[int], list[int]] | None = None,
    ) -> None:
        self.budget = max(0, int(budget))
        self.open, self.close = tags[0].encode(), tags[1].encode()
        self.closing = list(closing)
        self.piece = piece
        self.shown = shown or {}
        self.finish = finish
        self.state = "thinking" if started else "start"  # then "done": closed, or never opened
        self.spent = 0
        self.queue: list[int] = []  # the closing tokens still to force
        self.text = b""  # the answer's start while undecided; in the thinking, what may begin its closing tag

    @property
    def pending(self) -> bool:
        """Whether the budget may still force a token (the thinking has not closed, or may still open)."""
        return self.state != "done"

    def forced(self) -> int | None:
        """The token the next step must take, or None for a free draw."""
        if self.state != "thinking":
            return None
        if not self.queue and self.spent >= self.budget:
            begun = _begun(self.text, self.close)  # the thinking's end is its closing tag's first bytes
            if begun and self.finish is not None:
                self.queue = self.finish(begun) or list(self.closing)
            else:
                self.queue = list(self.closing)
        return self.queue[0] if self.queue else None

    def feed(self, token: int) -> None:
        """Record the token the request took for its next position."""
        if self.state == "done":
            return
        if self.queue:  # a forced closing token (the sampler took the one forced)
            taken = token == self.queue[0]
            self.queue = self.queue[1:] if taken else []  # not taken (a grammar refused it): nothing more is forced
            if not self.queue:
                self.state, self.text = "done", b""
            return
        text = self.text + (self.shown.get(token) or self.piece(token))
        if self.state == "start":
            lead = text.lstrip()
            if lead.startswith(self.open):
                self.state, text = "thinking", lead[len(self.open) :]
                if self.close in text:
                    self.state, self.text = "done", b""
                else:
                    self.text = text[-(len(self.close) - 1) :] if len(self.close) > 1 else b""
            elif lead and not self.open.startswith(lead):
                self.state, self.text = "done", b""  # the answer starts with text: no thinking
            else:
                self.text = text  # nothing yet, or the opening tag in the making
            return  # the token that opens the thinking is not counted
        if self.close in text:
            self.state, self.text = "done", b""
            return
        self.spent += 1
        self.text = text[-(len(self.close) - 1) :] if len(self.close) > 1 else b""


def _begun(text: bytes, tag: bytes) -> int:
    """How many of ``tag``'s first bytes ``text`` ends with (0: none; never the whole tag)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


def thinking_budget_for(
    rendered: Any, budget: int | None, encode: Callable[[str], list[int]], piece: Callable[[int], bytes]
) -> ThinkingBudget | None:
    """The budget of a chat request's thinking, or None where it has none (no budget asked, a raw prompt, a model
    whose thinking has no closing tag).

    Args:
        rendered: The request's :class:`~engine.tools.render.RenderedChat` (None for a raw prompt).
        budget: Tokens its thinking may take (None or -1: no cap).
        encode: Text to the model's token ids, special tokens read as such.
        piece: A token's bytes.
    """
    if budget is None or budget < 0 or rendered is None:
        return None
    if rendered.tool_format == "harmony":
        opening, close, forced = _HARMONY
        started = False
    else:
        opening, close = rendered.think_tags
        forced, started = close, rendered.thinking_started
    if not opening or not close:
        return None
    closing = encode(forced)
    if not closing:
        return None
    shown: dict[int, bytes] = {}  # a control token's piece is empty: the tags it writes are matched by its text
    for part in {opening, close, forced, *_CONTROL.findall(opening + close + forced), *rendered.markers}:
        ids = encode(part)
        if len(ids) == 1 and not piece(ids[0]):
            shown[ids[0]] = part.encode()

    def finish(begun: int) -> list[int]:  # the rest of a closing tag the thinking's last tokens began
        rest = forced.encode()[begun:]
        try:
            return encode(rest.decode())
        except UnicodeDecodeError:  # a character cut by the bytes begun
            return []

    # a tag written in several tokens can be begun by the thinking's last ones; one that is a token of its own
    # cannot (text that looks like its start is text)
    spelled = forced.startswith(close) and len(encode(close)) > 1
    return ThinkingBudget(budget, (opening, close), closing, piece, started=started, shown=shown,
                          finish=finish if spelled else None)  # fmt: skip


__all__ = ["ThinkingBudget", "thinking_budget_for"]
