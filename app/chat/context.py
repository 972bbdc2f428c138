"""The context overflow policy: drop the oldest turns, keep the system prompt.

Tokens are estimated from characters (about four per token for English, with a margin); the
worker is the judge: when it still answers ``context_length_exceeded``, the run shrinks the
budget and tries again (see :class:`app.chat.answer_run.AnswerRun`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.store.records import MessageRecord

CHARS_PER_TOKEN = 4.0
MARGIN = 1.2  # code and non-English text take more tokens per character
MESSAGE_OVERHEAD = 8  # role markers of the chat template
IMAGE_TOKENS = 768  # what a picture costs a typical vision model (Gemma 3: 256, Qwen2.5-VL: up to ~1,000)
DEFAULT_CONTEXT = 2048


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN * MARGIN) + MESSAGE_OVERHEAD


@dataclass(frozen=True, slots=True)
class ContextFit:
    """The messages to send (system first) and how many earlier messages were left out."""

    messages: tuple[dict[str, str], ...]  # with ``reasoning_content`` on answers that thought
    dropped: int
    records: tuple[MessageRecord | None, ...] = ()  # the message behind each of ``messages`` (None: the system prompt)

    @property
    def notice(self) -> str:
        if not self.dropped:
            return ""
        noun = "message" if self.dropped == 1 else "messages"
        return f"{self.dropped} earlier {noun} left out to fit the context"


def answer_reserve(context_length: int, max_tokens: int | None) -> int:
    """Tokens kept free for the answer: its limit, within a quarter to a half of the context."""
    quarter = context_length // 4
    return min(max(max_tokens or quarter, 16), context_length // 2)


def fit_history(
    history: Sequence[MessageRecord],
    *,
    system_prompt: str,
    context_length: int,
    max_tokens: int | None,
    reasoning: Mapping[int, str] | None = None,
) -> ContextFit:
    """The newest turns of ``history`` that fit ``context_length`` with room for the answer.

    The last message (the one being answered) is always kept, and the kept part never starts
    with an assistant message (a reply without its question confuses small models). An answer's
    ``reasoning`` (by message id) goes with it as ``reasoning_content``: the engine passes it to a
    chat template that asks for it and drops it for the others, so it is not counted here.
    """
    budget = context_length - answer_reserve(context_length, max_tokens)
    if system_prompt:
        budget -= estimate_tokens(system_prompt)
    kept: list[MessageRecord] = []
    used = 0
    for message in reversed(history):
        cost = estimate_tokens(message.content) + IMAGE_TOKENS * len(message.images)
        if kept and used + cost > budget:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    while len(kept) > 1 and kept[0].role == "assistant":
        kept.pop(0)
    dropped = len(history) - len(kept)
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    records: list[MessageRecord | None] = [None] * len(messages)
    reasoning = reasoning or {}
    for m in kept:
        item = {"role": m.role, "content": m.content}
        if m.role == "assistant" and reasoning.get(m.id):
            item["reasoning_content"] = reasoning[m.id]
        messages.append(item)
        records.append(m)
    return ContextFit(messages=tuple(messages), dropped=dropped, records=tuple(records))
