"""The one-time move of agent steps out of ``agent-steps.db`` into the chat store.

The first agent release kept each answer's thinking and tool calls in that side file beside the
chats; they now live with their message in ``chats.db`` (app.store: deleted and exported with the
chat). At startup the file's rows join their messages and the file is removed.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from app.store.chat_store import ChatStore
from app.store.records import AnswerSteps
from app.store.recovery import remove_database

log = logging.getLogger(__name__)

LEGACY_NAME = "agent-steps.db"


def import_legacy_steps(folder: Path, store: ChatStore) -> int:
    """Move the steps of ``folder``'s ``agent-steps.db`` into ``store``, then remove the file.

    Steps an answer already has in the store are kept; rows of deleted messages are dropped. A file
    that cannot be read is left for the next start. Returns how many answers got their steps.
    """
    path = folder / LEGACY_NAME
    if not path.exists() or store.problem is not None:
        return 0  # a side file or a recovered database: its message ids are not the file's
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT message_id, data FROM steps").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        log.warning("cannot read %s (%s); it is kept", path, exc)
        return 0
    moved = 0
    for message_id, data in rows:
        try:
            steps = AnswerSteps.from_json(data)
        except (ValueError, TypeError):
            continue
        if store.steps(message_id) is None and store.save_steps(message_id, steps):
            moved += 1
    remove_database(path)
    log.info("moved the steps of %d answers from %s into the chat store", moved, path.name)
    return moved


__all__ = ["LEGACY_NAME", "import_legacy_steps"]
