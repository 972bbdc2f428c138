"""The plain objects the store hands out: chats, messages, per-answer stats, settings.

Frozen dataclasses, free of SQLAlchemy and Qt, so Qt models and exports adapt them directly.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime

from app.store.images import ImageRef
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
    """Per-chat choices: the model, the system prompt, the sampling, the thinking switch (None: the
    model's default), whether the model must call a tool on its first turn, and the MCP servers (by name)
    its answers may call."""

    model: str = STARTER_NAME
    system_prompt: str = ""
    sampling: SamplingSettings = SamplingSettings()
    thinking: bool | None = None
    tool_first: bool = False
    mcp_servers: tuple[str, ...] = ()


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
    accepted_draft_tokens: int = 0  # of ``tokens``, those speculative decoding drafted and the model kept


@dataclass
class AnswerSteps:
    """What an answer did before its text: its thinking (text, seconds, tokens), its tool calls
    (``engine.agent.ToolCallRecord.as_dict()``) and notices (a server that failed, the round limit).

    Mutable: a run fills it in as the answer streams; the store keeps it with the message.
    """

    reasoning: str = ""
    thinking_seconds: float | None = None
    thinking_tokens: int = 0
    thinking_done: bool = False
    calls: list[dict] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # what the request's preparers added ("Documents: manual")

    @property
    def empty(self) -> bool:
        return not (self.reasoning or self.calls or self.notices or self.added)

    def upsert_call(self, call: dict) -> None:
        for i, c in enumerate(self.calls):
            if c["id"] == call["id"]:
                self.calls[i] = call
                return
        self.calls.append(call)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> AnswerSteps:
        """Raises ValueError or TypeError for text that is not an object of steps."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("steps must be a JSON object")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True, slots=True)
class DocSource:
    """A passage of an attached document collection that an answer was given (/api/docs/context's
    ``sources``): its [number] marker, where it came from, its retrieval score and its text."""

    number: int
    label: str  # "[2] manual.pdf, page 3"
    uri: str  # opens the file at the place (file:///…/manual.pdf#page=3)
    path: str
    score: float | None = None
    text: str = ""
    page: int | None = None
    heading: str | None = None

    @classmethod
    def from_json(cls, d: dict) -> DocSource:
        """Raises KeyError, TypeError or ValueError for an object that is not a source."""
        score, page, heading = d.get("score"), d.get("page"), d.get("heading")
        return cls(
            number=int(d["number"]),
            label=str(d["label"]),
            uri=str(d["uri"]),
            path=str(d["path"]),
            score=float(score) if score is not None else None,
            text=str(d.get("text") or ""),
            page=int(page) if page is not None else None,
            heading=str(heading) if heading is not None else None,
        )

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class MessageRecord:
    id: int
    chat_id: int
    role: str  # user | assistant
    content: str
    created_at: datetime
    stats: AnswerStats | None = None
    sources: tuple[DocSource, ...] = ()  # the document passages the answer was given
    parent_id: int | None = None  # the message it follows (None: a first message); siblings are branches
    images: tuple[ImageRef, ...] = ()  # the pictures attached to a question

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
    collections: tuple[str, ...] = ()  # document collections attached: they answer the chat's questions
    split_of: int | None = None  # side by side: the chat this one is the second column of


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
    other_apps_offered: bool = False  # the question about other apps' models was answered once
    min_speed: float = 10.0  # tokens/s under which Discover calls a model "slow here" and does not recommend it
