"""Side by side: a chat split to a second model keeps that model's conversation in a companion chat.

The companion's ``split_of`` names the chat it sits beside; the chat list shows only the chat itself.

Revision ID: 0007_split_chats
Revises: 0006_chat_flags
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_split_chats"
down_revision = "0006_chat_flags"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chats") as batch:
        batch.add_column(sa.Column("split_of", sa.Integer(), nullable=True))
        batch.create_index("ix_chats_split_of", ["split_of"])


def downgrade() -> None:
    with op.batch_alter_table("chats") as batch:
        batch.drop_index("ix_chats_split_of")
        batch.drop_column("split_of")
