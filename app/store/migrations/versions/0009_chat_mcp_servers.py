"""The MCP servers each chat uses live in its row, with its other settings: a fork, a split's column and a
deleted chat take them along.

An earlier Hearth kept them in ``mcp-servers.json`` beside the database (``"chats": {"<chat id>": [names]}``);
they are copied into the rows here, and :func:`app.store.legacy_flags.drop_tables` takes them out of that file
once this revision is committed.

Revision ID: 0009_chat_mcp_servers
Revises: 0008_message_images
Create Date: 2026-12-04
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import op

from app.store.legacy_flags import read_flags
from app.store.row_mapping import names_json

revision = "0009_chat_mcp_servers"
down_revision = "0008_message_images"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("chats", sa.Column("mcp_servers", sa.Text(), nullable=False, server_default="[]"))
    bind = op.get_bind()
    database = bind.engine.url.database
    if not database or database == ":memory:":
        return
    chats = sa.table("chats", sa.column("id", sa.Integer), sa.column("mcp_servers", sa.Text))
    for chat_id, names in read_flags(Path(database)).servers.items():
        bind.execute(sa.update(chats).where(chats.c.id == chat_id).values(mcp_servers=names_json(names)))


def downgrade() -> None:
    # SQLite's own DROP COLUMN: a copy-and-move of ``chats`` would drop the table, and every message with it.
    op.execute("ALTER TABLE chats DROP COLUMN mcp_servers")
