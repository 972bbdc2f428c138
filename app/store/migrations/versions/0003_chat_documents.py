"""Documents in chats: the collections attached to each chat, and the passages each answer was given.

Revision ID: 0003_chat_documents
Revises: 0002_message_steps
Create Date: 2026-12-15
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_chat_documents"
down_revision = "0002_message_steps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN: SQLite keeps every chat and message as it is; chats start with nothing attached.
    op.add_column("chats", sa.Column("doc_collections", sa.Text(), nullable=False, server_default="[]"))
    op.add_column("messages", sa.Column("doc_sources", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("doc_sources")
    with op.batch_alter_table("chats") as batch:
        batch.drop_column("doc_collections")
