"""Chat exports with each answer's thinking and tool calls (app.store.export writes them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.store.export import to_json, to_markdown
from app.store.images import ImageRef
from app.store.records import AnswerSteps, ChatRecord, MessageRecord


def export_text(
    chat: ChatRecord,
    messages: list[MessageRecord],
    fmt: str,
    steps_of: Callable[[int], AnswerSteps | None] | None,
    *,
    tree: Sequence[MessageRecord] = (),
    image_data: Callable[[ImageRef], str | None] | None = None,
) -> str:
    """Markdown (``md``) of the path shown (``messages``), or JSON of it and every other branch in
    ``tree`` (``ChatStore.all_messages``); answers carry their steps when ``steps_of`` knows them
    (the window's: a running answer's live steps, else the chat store's)."""
    if fmt == "md":
        steps = {m.id: steps_of(m.id) for m in messages if m.is_answer} if steps_of is not None else {}
        return to_markdown(chat, messages, steps)
    every = {m.id: m for m in (*tree, *messages)}.values()
    steps = {m.id: steps_of(m.id) for m in every if m.is_answer} if steps_of is not None else {}
    return to_json(chat, messages, steps, tree=tree, image_data=image_data)


__all__ = ["export_text"]
