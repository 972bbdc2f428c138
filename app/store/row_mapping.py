"""Rows of the store's tables to the plain records it hands out, and records back to column values."""

from __future__ import annotations

import json
import logging

from app.store.chat_documents import collections_from, sources_from
from app.store.images import images_from
from app.store.records import AnswerStats, ChatRecord, ChatSettings, MessageRecord, SamplingSettings
from app.store.schema import ChatRow, MessageRow

log = logging.getLogger(__name__)

# The columns of a chat's settings (a fork and a split's column copy them).
SETTINGS_COLUMNS = (
    "model", "system_prompt", "temperature", "top_p", "max_tokens", "seed", "thinking", "tool_first", "mcp_servers",
)  # fmt: skip


def names_json(names: tuple[str, ...] | list[str]) -> str:
    """A list of names as a column holds it: in their order, each once."""
    return json.dumps(list(dict.fromkeys(str(n) for n in names)), ensure_ascii=False)


def names_from(text: str | None) -> tuple[str, ...]:
    """The names a column holds; none where it cannot be read."""
    try:
        names = json.loads(text or "[]")
    except ValueError:
        log.warning("a chat's MCP servers cannot be read: %.80r", text)
        return ()
    return tuple(str(n) for n in names) if isinstance(names, list) else ()


def chat_record(row: ChatRow) -> ChatRecord:
    sampling = SamplingSettings(
        temperature=row.temperature, top_p=row.top_p, max_tokens=row.max_tokens, seed=row.seed
    )
    settings = ChatSettings(
        model=row.model,
        system_prompt=row.system_prompt,
        sampling=sampling,
        thinking=row.thinking,
        tool_first=bool(row.tool_first),
        mcp_servers=names_from(row.mcp_servers),
    )
    return ChatRecord(
        id=row.id,
        title=row.title,
        created_at=row.created_at,
        updated_at=row.updated_at,
        settings=settings,
        collections=collections_from(row.doc_collections),
        split_of=row.split_of,
    )


def message_record(row: MessageRow) -> MessageRecord:
    stats = None
    if row.role == "assistant":
        stats = AnswerStats(
            tokens=row.tokens or 0,
            tokens_per_second=row.tokens_per_second,
            ttft=row.ttft,
            finish_reason=row.finish_reason,
            dropped_messages=row.dropped_messages or 0,
            model=row.model or "",
            error=row.error,
            accepted_draft_tokens=row.accepted_draft_tokens or 0,
        )
    return MessageRecord(
        id=row.id,
        chat_id=row.chat_id,
        role=row.role,
        content=row.content,
        created_at=row.created_at,
        stats=stats,
        sources=sources_from(row.doc_sources),
        images=images_from(row.images),
        parent_id=row.parent_id,
    )


def apply_settings(row: ChatRow, settings: ChatSettings) -> None:
    row.model = settings.model
    row.system_prompt = settings.system_prompt
    row.temperature = settings.sampling.temperature
    row.top_p = settings.sampling.top_p
    row.max_tokens = settings.sampling.max_tokens
    row.seed = settings.sampling.seed
    row.thinking = settings.thinking
    row.tool_first = settings.tool_first
    row.mcp_servers = names_json(settings.mcp_servers)


def stats_values(stats: AnswerStats) -> dict:
    return {
        "model": stats.model,
        "tokens": stats.tokens,
        "tokens_per_second": stats.tokens_per_second,
        "ttft": stats.ttft,
        "finish_reason": stats.finish_reason,
        "dropped_messages": stats.dropped_messages,
        "error": stats.error,
        "accepted_draft_tokens": stats.accepted_draft_tokens,
    }


STATS_FIELDS = frozenset(stats_values(AnswerStats()))


def apply_stats(row: MessageRow, stats: AnswerStats) -> None:
    for key, value in stats_values(stats).items():
        setattr(row, key, value)


__all__ = ["SETTINGS_COLUMNS", "names_from", "names_json", "STATS_FIELDS", "apply_settings", "apply_stats", "chat_record", "message_record", "stats_values"]
