"""What an earlier Hearth kept per chat in ``mcp-servers.json``, moved into the chat store once.

Those releases wrote, beside the MCP servers, ``{"thinking": {"<chat id>": true}, "tool_first": {"<chat id>":
true}}`` (moved by migration ``0006_chat_flags``) and ``{"chats": {"<chat id>": ["server", ...]}}``, the servers
each chat used (moved by ``0009_chat_mcp_servers``). A migration copies its tables into the chats' rows
(:func:`read_flags`); once the upgrade is committed, :func:`drop_tables` rewrites the file without the tables
moved, every other key as it was. A file that is missing or cannot be read is skipped with a log line: it never
stops the app.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from engine.remote.keys import write_private_text

log = logging.getLogger(__name__)

FILE_NAME = "mcp-servers.json"
# The tables of the file each migration moves into the chats' rows.
MOVED_BY = {"0006_chat_flags": ("thinking", "tool_first"), "0009_chat_mcp_servers": ("chats",)}
# Only the data folder's own database takes them: a side file (chats kept aside while the database
# was locked) has other chat ids, and its chats join the database later.
DATABASE_NAME = "chats.db"


@dataclass(frozen=True, slots=True)
class LegacyFlags:
    """Each chat's switches and MCP servers, by chat id, as the file held them."""

    thinking: dict[int, bool] = field(default_factory=dict)
    tool_first: dict[int, bool] = field(default_factory=dict)
    servers: dict[int, tuple[str, ...]] = field(default_factory=dict)


def _load(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("the chats' settings in %s cannot be read, so they are left there: %s", path, exc)
        return None
    if not isinstance(data, dict):
        log.warning("%s is not a JSON object; the chats' settings in it are left there", path)
        return None
    return data


def _table(data: dict, key: str, valid) -> dict[int, object]:
    table = data.get(key)
    if not isinstance(table, dict):
        return {}
    return {int(chat_id): value for chat_id, value in table.items() if str(chat_id).isdigit() and valid(value)}


def _names(value) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


def read_flags(database: Path) -> LegacyFlags:
    """The chats' settings kept in the ``mcp-servers.json`` beside ``database``; none for a side file."""
    if database.name != DATABASE_NAME:
        return LegacyFlags()
    data = _load(database.with_name(FILE_NAME))
    if data is None:
        return LegacyFlags()
    flag = lambda value: isinstance(value, bool)  # noqa: E731
    servers = {chat_id: tuple(names) for chat_id, names in _table(data, "chats", _names).items()}
    return LegacyFlags(thinking=_table(data, "thinking", flag), tool_first=_table(data, "tool_first", flag), servers=servers)


def moved_tables(database: Path, before: str | None, after: str | None) -> tuple[str, ...]:
    """The tables of the file that an upgrade of ``database`` from revision ``before`` to ``after`` moved.

    Revisions are named ``NNNN_what``, so their numbers order them.
    """
    if database.name != DATABASE_NAME or after is None:
        return ()
    moved: tuple[str, ...] = ()
    for revision, tables in MOVED_BY.items():
        number = int(revision[:4])
        if (before is None or int(before[:4]) < number) and int(after[:4]) >= number:
            moved += tables
    return moved


def drop_tables(database: Path, tables: tuple[str, ...]) -> bool:
    """Rewrite the ``mcp-servers.json`` beside ``database`` without ``tables`` (atomically: a temporary file
    renamed over it). True when the file was rewritten."""
    path = database.with_name(FILE_NAME)
    data = _load(path) if tables else None
    if data is None or not any(key in data for key in tables):
        return False
    kept = {key: value for key, value in data.items() if key not in tables}
    try:
        write_private_text(path, json.dumps(kept, indent=2))
    except OSError as exc:
        log.warning("the chats' settings are in the chat store now, but %s could not be rewritten: %s", path, exc)
        return False
    log.info("the chats' %s moved from %s into the chat store", ", ".join(t for t in tables if t in data), path)
    return True


__all__ = ["FILE_NAME", "LegacyFlags", "drop_tables", "moved_tables", "read_flags"]
