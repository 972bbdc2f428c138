"""The SQLite tables of the app's store. Changes go through an Alembic migration in migrations/."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class ChatRow(Base):
    __tablename__ = "chats"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String(200), default="New chat")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    model: Mapped[str] = mapped_column(String(300))
    system_prompt: Mapped[str] = mapped_column(Text, default="")
    temperature: Mapped[float] = mapped_column(Float, default=0.7)
    top_p: Mapped[float] = mapped_column(Float, default=0.95)
    max_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    seed: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The document collections attached to the chat: a JSON list of their names.
    doc_collections: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
    # The thinking switch (NULL: the model's default) and "call a tool first".
    thinking: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    tool_first: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # The MCP servers the chat's answers may call: a JSON list of their names (the servers themselves are the
    # app's, in mcp-servers.json).
    mcp_servers: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
    # Side by side: this chat is the second model's column of chat ``split_of`` (hidden from the list).
    split_of: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)


class MessageRow(Base):
    __tablename__ = "messages"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    chat_id: Mapped[int] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"), index=True)
    # Messages form a tree: a regenerated answer or an edited question is a sibling of the one it replaces.
    # NULL: a first message (the first question, or an edit of it).
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), nullable=True, index=True)
    # When the message was last on its chat's active path (a per-chat counter). The active leaf is the message
    # with the highest (active_seq, id); below any message the child with the highest one is the branch last shown.
    active_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    role: Mapped[str] = mapped_column(String(20))
    content: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Per-answer stats (NULL on user messages).
    model: Mapped[str | None] = mapped_column(String(300), nullable=True)
    tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tokens_per_second: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft: Mapped[float | None] = mapped_column(Float, nullable=True)
    finish_reason: Mapped[str | None] = mapped_column(String(20), nullable=True)
    dropped_messages: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    accepted_draft_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # speculative decoding's, kept
    # The document passages an answer was given (records.DocSource objects as a JSON list); NULL when none.
    doc_sources: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The pictures attached (app.store.images.ImageRef as a JSON list); the files are in the images folder.
    images: Mapped[str | None] = mapped_column(Text, nullable=True)
    # An answer's thinking and tool calls (records.AnswerSteps as JSON); NULL when it had none.
    # Deferred: listing a chat's messages does not read them (ChatStore.steps does).
    steps: Mapped[str | None] = mapped_column(Text, nullable=True, deferred=True)


class SettingRow(Base):
    __tablename__ = "app_settings"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
