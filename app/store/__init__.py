"""The app's store: chats, messages and settings in SQLite (SQLAlchemy + Alembic)."""

from app.store.branching import CURRENT_LEAF
from app.store.chat_store import ChatStore, interrupted
from app.store.export import to_json, to_markdown
from app.store.records import (
    AnswerStats,
    AnswerSteps,
    AppSettings,
    ChatRecord,
    ChatSettings,
    MessageRecord,
    SamplingSettings,
)
from app.store.settings_store import SettingsStore

__all__ = [
    "CURRENT_LEAF",
    "AnswerStats",
    "AnswerSteps",
    "AppSettings",
    "ChatRecord",
    "ChatSettings",
    "ChatStore",
    "MessageRecord",
    "SamplingSettings",
    "SettingsStore",
    "interrupted",
    "to_json",
    "to_markdown",
]
