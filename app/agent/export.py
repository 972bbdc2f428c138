"""Chat exports with each answer's thinking and tool calls (app.store.export writes them)."""

from __future__ import annotations

from collections.abc import Callable

from app.store.export import to_json, to_markdown
from app.store.records import AnswerSteps, ChatRecord, MessageRecord


def export_text(
    chat: ChatRecord,
    messages: list[MessageRecord],
    fmt: str,
    steps_of: Callable[[int], AnswerSteps | None] | None,
) -> str:
    """Markdown (``md``) or JSON of the chat; answers carry their steps when ``steps_of`` knows them
    (the window's: a running answer's live steps, else the chat store's)."""
    steps = {m.id: steps_of(m.id) for m in messages if m.is_answer} if steps_of is not None else {}
    return to_markdown(chat, messages, steps) if fmt == "md" else to_json(chat, messages, steps)


__all__ = ["export_text"]
