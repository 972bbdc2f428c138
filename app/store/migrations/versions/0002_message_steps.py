"""An answer's steps (its thinking and tool calls) kept with the message, as JSON.

Revision ID: 0002_message_steps
Revises: 0001_initial
Create Date: 2026-12-14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_message_steps"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN: SQLite keeps every row as it is, the new column NULL (no steps).
    op.add_column("messages", sa.Column("steps", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("steps")
