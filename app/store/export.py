"""A chat as Markdown (to read) or JSON (to keep or feed to another tool), each answer with its
steps (thinking and tool calls) when it has some.

Markdown writes the path shown. JSON writes every branch: each message with its ``id`` and ``parent_id``,
and the chat's ``active_leaf_id`` (the last message of the path shown), so a reader can rebuild the tree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict

from app.store.images import ImageRef
from app.store.records import AnswerSteps, ChatRecord, MessageRecord
from app.units import counted

EXPORT_VERSION = 2  # 2: every branch, messages with id and parent_id


def _stats_line(message: MessageRecord) -> str:
    s = message.stats
    if s is None or not s.tokens:
        return ""
    parts = [counted(s.tokens, "token")]
    if s.tokens_per_second:
        parts.append(f"{s.tokens_per_second:.1f} tokens/s")
    if s.ttft is not None:
        parts.append(f"first token {s.ttft * 1000:.0f} ms")
    if s.model:
        parts.append(s.model)
    return "*" + " · ".join(parts) + "*"


def sources_markdown(message: MessageRecord) -> list[str]:
    """Markdown lines of the document passages an answer was given: label, score and a link to the place."""
    if not message.sources:
        return []
    lines = ["**Sources**", ""]
    for src in message.sources:
        score = f" · score {src.score:.3f}" if src.score is not None else ""
        lines.append(f"- {src.label}{score} · <{src.uri}>")
    return [*lines, ""]


def steps_markdown(steps: AnswerSteps | None) -> list[str]:
    """Markdown lines of an answer's steps: the thinking as a quote, each call with its result."""
    if steps is None or steps.empty:
        return []
    lines: list[str] = []
    if steps.reasoning:
        took = f" ({steps.thinking_seconds:.1f} s)" if steps.thinking_seconds else ""
        lines += [f"**Thinking**{took}", ""] + [f"> {line}" for line in steps.reasoning.splitlines()] + [""]
    for c in steps.calls:
        lines += [f"**Tool call** `{c['name']}` ({c['status']}): `{c['arguments']}`", "", "```text", c["result"], "```", ""]
    return lines


def to_markdown(
    chat: ChatRecord, messages: list[MessageRecord], steps: Mapping[int, AnswerSteps | None] | None = None
) -> str:
    """The chat to read: ``messages`` is the path shown; ``steps`` (by message id) go above their answers' text."""
    lines = [f"# {chat.title}", "", f"Model: `{chat.settings.model}`", ""]
    if chat.settings.system_prompt:
        lines += ["## System", "", chat.settings.system_prompt, ""]
    for m in messages:
        lines += [f"## {'You' if m.role == 'user' else 'Assistant'}", ""]
        lines += [*steps_markdown((steps or {}).get(m.id)), m.content, ""]
        if m.images:  # the pictures themselves travel in the JSON export
            lines += [", ".join(f"[picture: {i.name or i.sha256[:12]}]" for i in m.images), ""]
        lines += sources_markdown(m)
        stats = _stats_line(m)
        if stats:
            lines += [stats, ""]
    return "\n".join(lines).rstrip() + "\n"


def _images_json(m: MessageRecord, data_url: Callable[[ImageRef], str | None] | None) -> list[dict]:
    """A message's pictures, each with its bytes as a data URL where ``data_url`` has them."""
    out = []
    for ref in m.images:
        url = data_url(ref) if data_url is not None else None
        out.append({**asdict(ref), **({"data_url": url} if url else {})})
    return out


def _message_json(m: MessageRecord, steps: AnswerSteps | None, data_url: Callable[[ImageRef], str | None] | None = None) -> dict:
    return {
        "id": m.id,
        "parent_id": m.parent_id,
        "role": m.role,
        "content": m.content,
        "created_at": m.created_at.isoformat(),
        **({"stats": asdict(m.stats)} if m.stats is not None else {}),
        **({"steps": asdict(steps)} if steps is not None and not steps.empty else {}),
        **({"sources": [src.as_dict() for src in m.sources]} if m.sources else {}),
        **({"images": _images_json(m, data_url)} if m.images else {}),
    }


def to_json(
    chat: ChatRecord,
    messages: list[MessageRecord],
    steps: Mapping[int, AnswerSteps | None] | None = None,
    *,
    tree: Sequence[MessageRecord] = (),
    image_data: Callable[[ImageRef], str | None] | None = None,
) -> str:
    """The chat to keep: ``messages`` is the path shown, ``tree`` every message of every branch
    (``ChatStore.all_messages``; where both have a message, the path's copy is written, as it may be
    newer: an answer still streaming). An answer with ``steps`` (by message id) carries them."""
    steps = steps or {}
    by_id = {m.id: m for m in tree}
    by_id.update((m.id, m) for m in messages)
    data = {
        "hearth_export": EXPORT_VERSION,
        "title": chat.title,
        "created_at": chat.created_at.isoformat(),
        "settings": asdict(chat.settings),
        "active_leaf_id": messages[-1].id if messages else None,
        "messages": [_message_json(m, steps.get(m.id), image_data) for _, m in sorted(by_id.items())],
        **({"collections": list(chat.collections)} if chat.collections else {}),
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
