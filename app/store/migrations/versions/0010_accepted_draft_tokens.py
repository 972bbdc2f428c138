"""An answer's speculative-decoding figure is named for what it holds: of its tokens, those drafted and kept
(``drafted_tokens`` becomes ``accepted_draft_tokens``; every value stays).

Revision ID: 0010_accepted_draft_tokens
Revises: 0009_chat_mcp_servers
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0010_accepted_draft_tokens"
down_revision = "0009_chat_mcp_servers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # SQLite's own RENAME COLUMN: a copy-and-move of ``messages`` would cascade into the answers below each one.
    op.execute("ALTER TABLE messages RENAME COLUMN drafted_tokens TO accepted_draft_tokens")


def downgrade() -> None:
    op.execute("ALTER TABLE messages RENAME COLUMN accepted_draft_tokens TO drafted_tokens")
