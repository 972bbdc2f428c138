"""Request preparers: each feature that changes what an answer asks the worker for is one preparer.

Each preparer says where it runs (its ``order``; the controller keeps them sorted by it): documents first,
then the thinking switch, then tools (which may choose the agent loop), then attachments (the last message's
parts). Before an answer starts, each one gets the :class:`AnswerRequest` and may add to its body, choose the
producer and say in a few words what it added; the answer shows those words. No preparer reaches into another
feature's objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from app.chat.producer import AnswerProducer, ChatRequestBody
from app.store.records import ChatRecord, MessageRecord

ProducerFactory = Callable[[], AnswerProducer]


@dataclass
class AnswerRequest:
    """What one answer will ask for, while the preparers build it."""

    chat: ChatRecord
    body: ChatRequestBody
    records: tuple[MessageRecord | None, ...] = ()  # the message behind each of body.messages (None: system)
    added: list[str] = field(default_factory=list)  # "Documents: manual", "Tools: files" ...
    producer: ProducerFactory | None = None  # None: a plain stream


class RequestPreparer(Protocol):
    """One feature's part of a request."""

    name: str
    order: int  # where it runs among the preparers: lower first; a feature of its own runs after the app's (100+)

    def prepare(self, request: AnswerRequest) -> None: ...


class ThinkingPreparer:
    """The chat's thinking switch: templates with ``enable_thinking`` get it on or off."""

    name = "thinking"
    order = 20  # after documents, before tools

    def prepare(self, request: AnswerRequest) -> None:
        thinking = request.chat.settings.thinking
        if thinking is None:
            return  # the model's own default
        request.body.enable_thinking = thinking
        if not thinking:
            request.added.append("Thinking off")


__all__ = ["AnswerRequest", "ChatRequestBody", "ProducerFactory", "RequestPreparer", "ThinkingPreparer"]
