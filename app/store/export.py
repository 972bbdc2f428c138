"""A chat as Markdown (to read) or JSON (to keep or feed to another tool)."""

from __future__ import annotations

import json
from dataclasses import asdict

from app.store.records import ChatRecord, MessageRecord

EXPORT_VERSION = 1


def _stats_line(message: MessageRecord) -> str:
    s = message.stats
    if s is None or not s.tokens:
        return ""
    parts = [f"{s.tokens} tokens"]
    if s.tokens_per_second:
        parts.append(f"{s.tokens_per_second:.1f} tokens/s")
    if s.ttft is not None:
        parts.append(f"first token {s.ttft * 1000:.0f} ms")
    if s.model:
        parts.append(s.model)
    return "*" + " · ".join(parts) + "*"


def to_markdown(chat: ChatRecord, messages: list[MessageRecord]) -> str:
    lines = [f"# {chat.title}", "", f"Model: `{chat.settings.model}`", ""]
    if chat.settings.system_prompt:
        lines += ["## System", "", chat.settings.system_prompt, ""]
    for m in messages:
        lines += [f"## {'You' if m.role == 'user' else 'Assistant'}", "", m.content, ""]
        stats = _stats_line(m)
        if stats:
            lines += [stats, ""]
    return "\n".join(lines).rstrip() + "\n"


def to_json(chat: ChatRecord, messages: list[MessageRecord]) -> str:
    data = {
        "hearth_export": EXPORT_VERSION,
        "title": chat.title,
        "created_at": chat.created_at.isoformat(),
        "settings": asdict(chat.settings),
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "created_at": m.created_at.isoformat(),
                **({"stats": asdict(m.stats)} if m.stats is not None else {}),
            }
            for m in messages
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
