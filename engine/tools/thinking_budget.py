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

# gpt-oss's thinking is its analysis channel: it ends with <|end|>, and the answer is the final channel's message
_CONTROL = re.compile(r"<\|[^|<>]{1,40}\|>")  # a control token's text, as harmony's <|end|>
_HARMONY = ("<|channel|>analysis<|message|>", "<|end|>", "<|end|><|start|>assistant<|channel|>final<|message|>")


class ThinkingBudget:
    """One request's thinking, counted in tokens, and the closing tag's tokens once the count reaches the budget.

    Args:
        budget: Tokens the thinking may take (0: closed at once, as soon as it opens).
        tags: The texts that open and close the thinking.
        closing: The tokens forced to close it (the closing tag's, or a harmony model's switch to its answer).
        piece: A token's bytes.
        started: The prompt opened the thinking (the answer starts inside it).
        shown: Bytes of tokens whose piece is empty (control tokens that write the tags).
    """

    __slots__ = ("budget", "open", "close", "closing", "piece", "shown", "inside", "spent", "queue", "done", "tail")

    def __init__(
        self,
        budget: int,
        tags: tuple[str, str],
        closing: list[int],
        piece: Callable[[int], bytes],
        *,
        started: bool = False,
        shown: dict[int, bytes] | None = None,
    ) -> None:
        self.budget = max(0, int(budget))
        self.open, self.close = tags[0].encode(), tags[1].encode()
        self.closing = list(closing)
        self.piece = piece
        self.shown = shown or {}
        self.inside = started
        self.spent = 0
        self.queue: list[int] = []  # the closing tokens still to force
        self.done = False  # the thinking closed (by the model or by force): nothing more to count
        self.tail = b""

    @property
    def pending(self) -> bool:
        """Whether the budget may still force a token (the thinking has not closed yet)."""
        return not self.done

    def forced(self) -> int | None:
        """The token the next step must take, or None for a free draw."""
        if self.done or not self.inside:
            return None
        if not self.queue and self.spent >= self.budget:
            self.queue = list(self.closing)
        return self.queue[0] if self.queue else None

    def feed(self, token: int) -> None:
        """Record the token the request took for its next position."""
        if self.done:
            return
        if self.queue:  # a forced closing token (the sampler took the one forced)
            if token == self.queue[0]:
                self.queue.pop(0)
            else:  # the forced token was not taken (a grammar refused it): no forcing from here
                self.queue.clear()
            if not self.queue:
                self.done, self.inside, self.tail = True, False, b""
            return
        text = self.tail + (self.shown.get(token) or self.piece(token))
        if not self.inside:
            at = text.find(self.open)
            if at < 0:
                self.tail = _keep(text, self.open)
                return
            self.inside, text = True, text[at + len(self.open) :]
            if self.close in text:
                self.done, self.inside, self.tail = True, False, b""
            else:
                self.tail = _keep(text, self.close)
            return  # the token that opens the thinking is not counted
        if self.close in text:
            self.done, self.inside, self.tail = True, False, b""
            return
        self.spent += 1
        self.tail = _keep(text, self.close)


def _keep(text: bytes, tag: bytes) -> bytes:
    """What of ``text`` may still be the start of ``tag``, split across the next token."""
    return text[-(len(tag) - 1) :] if len(tag) > 1 else b""


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
    for part in {opening, close, forced, *_CONTROL.findall(opening + close + forced)}:
        ids = encode(part)
        if len(ids) == 1 and not piece(ids[0]):
            shown[ids[0]] = part.encode()
    return ThinkingBudget(budget, (opening, close), closing, piece, started=started, shown=shown)


__all__ = ["ThinkingBudget", "thinking_budget_for"]
