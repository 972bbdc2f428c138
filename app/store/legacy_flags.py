"""The per-chat switches an earlier Hearth kept in ``mcp-servers.json``, moved into the chat store once.

That release wrote ``{"thinking": {"<chat id>": true}, "tool_first": {"<chat id>": true}}`` beside the
MCP servers. Migration ``0006_chat_flags`` copies them into the chats' rows (:func:`read_flags`); once that
is committed, :func:`drop_flags` rewrites the file without the two tables, every other key as it was.
A file that is missing or cannot be read is skipped with a log line: it never stops the app.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from engine.remote.keys import write_private_text

log = logging.getLogger(__name__)

FILE_NAME = "mcp-servers.json"
TABLES = ("thinking", "tool_first")
# Only the data folder's own database takes the flags: a side file (chats kept aside while the database
# was locked) has other chat ids, and its chats join the database later.
DATABASE_NAME = "chats.db"
MOVED_BY = "0006_chat_flags"


@dataclass(frozen=True, slots=True)
class LegacyFlags:
    """Each chat's switches, by chat id, as the file held them."""

    thinking: dict[int, bool] = field(default_factory=dict)
    tool_first: dict[int, bool] = field(default_factory=dict)


def _load(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("the chats' switches in %s cannot be read, so they are left there: %s", path, exc)
        return None
    if not isinstance(data, dict):
        log.warning("%s is not a JSON object; the chats' switches in it are left there", path)
        return None
    return data


def _table(data: dict, key: str) -> dict[int, bool]:
    table = data.get(key)
    if not isinstance(table, dict):
        return {}
    out: dict[int, bool] = {}
    for chat_id, value in table.items():
        if isinstance(value, bool) and str(chat_id).isdigit():
            out[int(chat_id)] = value
    return out


def read_flags(database: Path) -> LegacyFlags:
    """The switches kept in the ``mcp-servers.json`` beside ``database``; none for a side file."""
    if database.name != DATABASE_NAME:
        return LegacyFlags()
    data = _load(database.with_name(FILE_NAME))
    if data is None:
        return LegacyFlags()
    return LegacyFlags(thinking=_table(data, "thinking"), tool_first=_table(data, "tool_first"))


def moved_now(database: Path, before: str | None, after: str | None) -> bool:
    """Whether an upgrade of ``database`` from revision ``before`` to ``after`` ran the move.

    Revisions are named ``NNNN_what``, so their numbers order them.
    """
    if database.name != DATABASE_NAME or after is None:
        return False
    number = int(MOVED_BY[:4])
    return (before is None or int(before[:4]) < number) and int(after[:4]) >= number


def drop_flags(database: Path) -> bool:
    """Rewrite the ``mcp-servers.json`` beside ``database`` without the switches' tables (atomically: a
    temporary file renamed over it). True when the file was rewritten."""
    path = database.with_name(FILE_NAME)
    data = _load(path)
    if data is None or not any(key in data for key in TABLES):
        return False
    kept = {key: value for key, value in data.items() if key not in TABLES}
    try:
        write_private_text(path, json.dumps(kept, indent=2))
    except OSError as exc:
        log.warning("the chats' switches are in the chat store now, but %s could not be rewritten: %s", path, exc)
        return False
    log.info("the chats' thinking and tool-first switches moved from %s into the chat store", path)
    return True


__all__ = ["FILE_NAME", "LegacyFlags", "drop_flags", "moved_now", "read_flags"]
