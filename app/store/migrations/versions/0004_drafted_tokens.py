"""Speculative decoding's figure per answer: how many of its tokens were drafted and kept.

Revision ID: 0004_drafted_tokens
Revises: 0003_chat_documents
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_drafted_tokens"
down_revision = "0003_chat_documents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN: SQLite keeps every message as it is; earlier answers had no drafts.
    op.add_column("messages", sa.Column("drafted_tokens", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("drafted_tokens")
