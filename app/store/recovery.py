"""When the chat database cannot be used: locked by another program, or damaged.

The app starts either way and says what happened; no chat is ever lost without a word:

- damaged: the file (with its ``-wal`` and ``-shm`` companions) is kept as
  ``chats.damaged-<time>.db``, a new database takes its place, and every chat and message that
  can still be read from the damaged copy is copied into it;
- locked: the chats stay where they are, and the chats of this session go to a side file,
  ``chats-unsaved-<time>.db``, which joins the database at the next start that can open it.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)

UNSAVED_GLOB = "chats-unsaved-*.db"
COMPANIONS = ("-wal", "-shm", "-journal")
# SQLite's primary result codes (sqlite3 errors carry them since Python 3.11).
SQLITE_BUSY, SQLITE_LOCKED, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 5, 6, 11, 13, 26
_MAX_PROBES = 100_000  # ids looked up one by one past damage when the table's last id is unknown


class StoreLocked(Exception):
    """Another program holds the database's lock."""


class StoreDamaged(Exception):
    """The database file is not a database, or fails SQLite's integrity check."""


class StoreTooNew(Exception):
    """The database was made by a newer Hearth (its schema revision is unknown here): left untouched."""

    def __init__(self, revision: str) -> None:
        self.revision = revision
        super().__init__("This chat database was made by a newer Hearth; update Hearth to open it.")


def classify(exc: BaseException) -> type[Exception] | None:
    """StoreLocked or StoreDamaged for an error SQLite raised, by its result code; else None."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    if code is None:
        return None
    primary = code & 0xFF
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        return StoreLocked
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return StoreDamaged
    return None


def is_disk_full(exc: BaseException) -> bool:
    """Whether SQLite failed for want of disk space (SQLITE_FULL, or the OS's ENOSPC/EDQUOT)."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == SQLITE_FULL
    return isinstance(orig, OSError) and orig.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def keep_damaged_copy(path: Path) -> Path:
    """Move the damaged database (and its companions) aside; returns where it now is."""
    kept = path.with_name(f"{path.stem}.damaged-{stamp()}{path.suffix}")
    n = 1
    while kept.exists():
        n += 1
        kept = path.with_name(f"{path.stem}.damaged-{stamp()}-{n}{path.suffix}")
    path.replace(kept)
    for suffix in COMPANIONS:
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.replace(kept.with_name(kept.name + suffix))
    return kept


def remove_database(path: Path) -> None:
    for p in (path, *(path.with_name(path.name + s) for s in COMPANIONS)):
        p.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class Copied:
    chats: int
    messages: int
    complete: bool  # every row could be read


# Columns of the messages table an older database names otherwise (old name -> this one's).
RENAMED = {"drafted_tokens": "accepted_draft_tokens"}


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _last_id(conn: sqlite3.Connection, table: str) -> int | None:
    """The largest id ``table`` ever gave out (its AUTOINCREMENT counter), when that can be read."""
    try:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
    except sqlite3.DatabaseError:
        return None
    return int(row[0]) if row and isinstance(row[0], int) else None


def _readable_rows(conn: sqlite3.Connection, table: str, columns: list[str]) -> tuple[list[tuple], bool]:
    """Every row of ``table`` that can be read, in id order. A scan that hits a damaged page goes on
    past it by looking ids up one by one (each lookup reads only the pages on its own path)."""
    names = ", ".join(columns)
    scan = f"SELECT {names} FROM {table} WHERE id > ? ORDER BY id"  # noqa: S608 - our own table names
    point = f"SELECT {names} FROM {table} WHERE id = ?"  # noqa: S608
    top = _last_id(conn, table)
    rows: list[tuple] = []
    last, damaged = 0, False
    while True:
        try:
            for row in conn.execute(scan, (last,)):
                rows.append(row)
                last = row[0]
            break
        except sqlite3.DatabaseError:
            damaged = True
        limit = top if top is not None else last + _MAX_PROBES
        resumed = False
        while last < limit and not resumed:
            last += 1
            try:
                row = conn.execute(point, (last,)).fetchone()
            except sqlite3.DatabaseError:
                continue
            if row is not None:
                rows.append(row)
                resumed = True
        if not resumed:
            break
    if damaged:
        log.warning("%s: %d rows read past damaged pages", table, len(rows))
    return rows, not damaged


def _new_parent(old: int | None, has_parents: bool, new_ids: dict[int, int], previous: int | None) -> int | None:
    """A copied message's parent: the copy of its own; where that is lost (or the source kept no
    branches), the message copied before it in the chat, so the chat still reads as one path."""
    if has_parents and old is None:
        return None
    return new_ids.get(old, previous) if old is not None else previous


def copy_chats(source: Path, target: sqlite3.Connection) -> Copied:
    """Append every readable chat and message of the database file ``source`` to ``target`` (new ids;
    messages follow their chat, each below the copy of its parent). A message whose chat row is lost
    gets a chat of its own.

    Raises:
        sqlite3.DatabaseError: ``source`` cannot be opened at all.
    """
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        try:
            chat_cols = [c for c in _columns(src, "chats") if c in set(_columns(target, "chats"))]
            message_cols = [c for c in _columns(src, "messages") if RENAMED.get(c, c) in set(_columns(target, "messages"))]
        except sqlite3.DatabaseError:
            return Copied(0, 0, False)
        if "id" not in chat_cols or "id" not in message_cols:
            return Copied(0, 0, False)
        chats, chats_ok = _readable_rows(src, "chats", chat_cols)
        messages, messages_ok = _readable_rows(src, "messages", message_cols)
    finally:
        src.close()
    new_ids: dict[int, int] = {}
    kept_chat_cols = [c for c in chat_cols if c != "id"]
    insert_chat = f"INSERT INTO chats ({', '.join(kept_chat_cols)}) VALUES ({', '.join('?' * len(kept_chat_cols))})"
    kept_message_cols = [c for c in message_cols if c not in ("id", "chat_id", "parent_id")]
    insert_message = (
        f"INSERT INTO messages (chat_id, parent_id, {', '.join(RENAMED.get(c, c) for c in kept_message_cols)}) "
        f"VALUES (?, ?, {', '.join('?' * len(kept_message_cols))})"
    )
    has_parents = "parent_id" in message_cols  # an older database's chats are one branch each
    new_message_ids: dict[int, int] = {}
    last_in_chat: dict[int, int] = {}
    with target:
        for row in chats:
            values = dict(zip(chat_cols, row, strict=True))
            new_ids[values["id"]] = target.execute(insert_chat, [values[c] for c in kept_chat_cols]).lastrowid
        copied_messages = 0
        for row in messages:
            values = dict(zip(message_cols, row, strict=True))
            old_chat = values.get("chat_id")
            if old_chat not in new_ids:
                new_ids[old_chat] = target.execute(
                    "INSERT INTO chats (title, created_at, updated_at, model, system_prompt, temperature, top_p) "
                    "VALUES ('Recovered messages', ?, ?, '', '', 0.7, 0.95)",
                    (values.get("created_at"), values.get("created_at")),
                ).lastrowid
            chat = new_ids[old_chat]
            parent = _new_parent(values.get("parent_id"), has_parents, new_message_ids, last_in_chat.get(chat))
            new_id = target.execute(insert_message, [chat, parent, *(values[c] for c in kept_message_cols)]).lastrowid
            new_message_ids[values["id"]] = last_in_chat[chat] = new_id
            copied_messages += 1
    return Copied(len(new_ids), copied_messages, chats_ok and messages_ok)


__all__ = [
    "Copied",
    "StoreDamaged",
    "StoreLocked",
    "StoreTooNew",
    "UNSAVED_GLOB",
    "classify",
    "copy_chats",
    "is_disk_full",
    "keep_damaged_copy",
    "remove_database",
    "stamp",
]
