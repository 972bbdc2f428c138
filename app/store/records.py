"""The plain objects the store hands out: chats, messages, per-answer stats, settings.

Frozen dataclasses, free of SQLAlchemy and Qt, so Qt models and exports adapt them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from engine.starter import STARTER_NAME

DEFAULT_PORT = 8765


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """How a chat samples its answers. ``max_tokens`` None lets the model finish on its own."""

    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int | None = 1024
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """Per-chat choices: the model, the system prompt and the sampling."""

    model: str = STARTER_NAME
    system_prompt: str = ""
    sampling: SamplingSettings = SamplingSettings()


@dataclass(frozen=True, slots=True)
class AnswerStats:
    """Measured for one answer. ``finish_reason`` is None while it streams (or if it was cut off
    by a crash before the end): stop | length | cancelled | error."""

    tokens: int = 0
    tokens_per_second: float | None = None
    ttft: float | None = None
    finish_reason: str | None = None
    dropped_messages: int = 0
    model: str = ""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class MessageRecord:
    id: int
    chat_id: int
    role: str  # user | assistant
    content: str
    created_at: datetime
    stats: AnswerStats | None = None

    @property
    def is_answer(self) -> bool:
        return self.role == "assistant"


@dataclass(frozen=True, slots=True)
class ChatRecord:
    id: int
    title: str
    created_at: datetime
    updated_at: datetime
    settings: ChatSettings = ChatSettings()


@dataclass(frozen=True, slots=True)
class AppSettings:
    """App-wide settings. ``expose_api`` gives other apps the API on ``port`` (with ``api_key``
    if set, else without a key); ``lan`` also accepts other machines."""

    expose_api: bool = False
    port: int = DEFAULT_PORT
    api_key: str = ""
    cors_origins: tuple[str, ...] = field(default=())
    lan: bool = False
    theme: str = "system"  # system | light | dark
    default_model: str = STARTER_NAME
