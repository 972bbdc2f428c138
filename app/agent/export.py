"""Chat exports with each answer's thinking and tool calls (app.store.export gives the rest)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, replace

from app.agent.steps import AnswerSteps, steps_markdown
from app.store.export import to_json, to_markdown
from app.store.records import ChatRecord, MessageRecord


def export_text(
    chat: ChatRecord,
    messages: list[MessageRecord],
    fmt: str,
    steps_of: Callable[[int], AnswerSteps | None] | None,
) -> str:
    """Markdown (``md``) or JSON of the chat; answers carry their steps when ``steps_of`` knows them."""
    steps = {m.id: steps_of(m.id) for m in messages if m.is_answer} if steps_of is not None else {}
    if fmt == "md":
        shown = [
            replace(m, content="\n".join([*steps_markdown(steps[m.id]), m.content])) if steps.get(m.id) else m
            for m in messages
        ]
        return to_markdown(chat, shown)
    data = json.loads(to_json(chat, messages))
    for item, m in zip(data["messages"], messages, strict=True):
        s = steps.get(m.id)
        if s is not None and not s.empty:
            item["steps"] = asdict(s)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


__all__ = ["export_text"]
