"""Request preparers: each feature that changes what an answer asks the worker for is one preparer.

The chat controller holds them in order (documents, the thinking switch, tools, attachments). Before
an answer starts, each one gets the :class:`AnswerRequest` and may add to its body, choose the
producer (tools choose the agent loop) and say in a few words what it added; the answer shows
those words. No preparer reaches into another feature's objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from app.chat.producer import AnswerProducer
from app.store.records import ChatRecord, MessageRecord

ProducerFactory = Callable[[], AnswerProducer]


@dataclass
class AnswerRequest:
    """What one answer will ask for, while the preparers build it."""

    chat: ChatRecord
    body: dict
    records: tuple[MessageRecord | None, ...] = ()  # the message behind each of body["messages"] (None: system)
    added: list[str] = field(default_factory=list)  # "Documents: manual", "Tools: files" ...
    producer: ProducerFactory | None = None  # None: a plain stream

    def extension(self) -> dict:
        """The body's ``hearth`` object (Hearth's own request fields), created on first use."""
        return self.body.setdefault("hearth", {})


class RequestPreparer(Protocol):
    """One feature's part of a request."""

    name: str

    def prepare(self, request: AnswerRequest) -> None: ...


class ThinkingPreparer:
    """The chat's thinking switch: templates with ``enable_thinking`` get it on or off."""

    name = "thinking"

    def prepare(self, request: AnswerRequest) -> None:
        thinking = request.chat.settings.thinking
        if thinking is None:
            return  # the model's own default
        kwargs = request.body.setdefault("chat_template_kwargs", {})
        kwargs["enable_thinking"] = thinking
        if not thinking:
            request.added.append("Thinking off")


__all__ = ["AnswerRequest", "ProducerFactory", "RequestPreparer", "ThinkingPreparer"]
