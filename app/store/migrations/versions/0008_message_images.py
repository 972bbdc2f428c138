"""Pictures attached to messages: a JSON list of their references (the files are in ``images/``).

Revision ID: 0008_message_images
Revises: 0007_split_chats
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_message_images"
down_revision = "0007_split_chats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("messages", sa.Column("images", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("images")
