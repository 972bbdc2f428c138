"""Branches: each message points to the one it answers or follows, so a regenerated answer or an edited
question is kept beside the one it replaces.

Every existing chat becomes one branch: each message's parent is the message before it in its chat, and
the last message is the active leaf (every ``active_seq`` 0, so the highest id wins).

Revision ID: 0005_message_branches
Revises: 0004_drafted_tokens
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_message_branches"
down_revision = "0004_drafted_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN keeps every row in place (Alembic's SQLite support cannot add a column with a foreign key,
    # and a copy-and-move of the table is needless work for a nullable column).
    op.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages (id) ON DELETE CASCADE")
    op.add_column("messages", sa.Column("active_seq", sa.Integer(), nullable=False, server_default="0"))
    # The previous message of the same chat: an index seek per row on ix_messages_chat_id (chat_id, rowid).
    op.execute(
        "UPDATE messages SET parent_id = ("
        " SELECT MAX(p.id) FROM messages AS p WHERE p.chat_id = messages.chat_id AND p.id < messages.id)"
    )
    op.create_index("ix_messages_parent_id", "messages", ["parent_id"])


def downgrade() -> None:
    op.drop_index("ix_messages_parent_id", "messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("active_seq")
        batch.drop_column("parent_id")
