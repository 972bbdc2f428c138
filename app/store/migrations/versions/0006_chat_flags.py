"""Each chat's thinking switch and "tool first" flag live in its row, with its other settings.

An earlier Hearth kept them in ``mcp-servers.json`` beside the database; they are copied into the rows here,
and :func:`app.store.legacy_flags.drop_tables` takes them out of that file once this revision is committed.

Revision ID: 0006_chat_flags
Revises: 0005_message_branches
Create Date: 2026-12-03
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

from app.store.legacy_flags import read_flags

revision = "0006_chat_flags"
down_revision = "0005_message_branches"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("chats", sa.Column("thinking", sa.Boolean(), nullable=True))
    op.add_column("chats", sa.Column("tool_first", sa.Boolean(), nullable=False, server_default="0"))
    bind = op.get_bind()
    database = bind.engine.url.database
    if not database or database == ":memory:":
        return
    flags = read_flags(Path(database))
    chats = sa.table("chats", sa.column("id", sa.Integer), sa.column("thinking", sa.Boolean), sa.column("tool_first", sa.Boolean))
    for chat_id, on in flags.thinking.items():
        bind.execute(sa.update(chats).where(chats.c.id == chat_id).values(thinking=on))
    for chat_id, on in flags.tool_first.items():
        bind.execute(sa.update(chats).where(chats.c.id == chat_id).values(tool_first=on))


def downgrade() -> None:
    # SQLite's own DROP COLUMN: a copy-and-move of ``chats`` would drop the table, and every message with it.
    op.execute("ALTER TABLE chats DROP COLUMN tool_first")
    op.execute("ALTER TABLE chats DROP COLUMN thinking")
