"""Answer producers: where an answer's text, thinking, tool calls and sources come from.

An :class:`app.chat.answer_run.AnswerRun` takes one producer and knows nothing else about it: a
plain streamed chat completion (:class:`StreamProducer`), or the agent loop with its tool calls
(``app.agent.agent_producer.AgentProducer``). A producer emits what it hears and ends with exactly
one of ``finished`` or ``failed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.net.api import HearthApi
from app.net.chat_stream import ChatStream
from app.net.types import ApiError, StreamResult
from app.store.records import ChatSettings, DocSource
from engine.server.api_models import ChatDocuments, HearthRequest


@dataclass
class ChatRequestBody:
    """What one answer asks ``/v1/chat/completions`` for: the chat's model, its history as fitted and its
    sampling, and what the preparers add (the thinking switch, document collections, pictures in messages)."""

    model: str
    messages: list[dict] = field(default_factory=list)
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int | None = None
    seed: int | None = None
    enable_thinking: bool | None = None  # None: the model's default (the template's ``enable_thinking``)
    hearth: HearthRequest | None = None  # the document collections the worker answers from (None: none)
    continue_final_message: bool = False  # the last message is the answer going on (cut off at its token limit)

    @classmethod
    def for_chat(cls, settings: ChatSettings, messages: list[dict]) -> ChatRequestBody:
        sampling = settings.sampling
        return cls(model=settings.model, messages=messages, temperature=sampling.temperature, top_p=sampling.top_p,
                   max_tokens=sampling.max_tokens or None, seed=sampling.seed)  # fmt: skip

    def params(self) -> dict[str, Any]:
        """Every field but the model and the messages, as the API names them (the agent loop sends them each turn)."""
        params: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p}
        if self.max_tokens:
            params["max_tokens"] = self.max_tokens
        if self.seed is not None:
            params["seed"] = self.seed
        if self.enable_thinking is not None:
            params["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        if self.continue_final_message:
            params["continue_final_message"] = True
        if self.hearth is not None:  # as the worker reads it: what differs from its defaults
            params["hearth"] = self.hearth.model_dump(exclude_defaults=True)
        return params

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "messages": self.messages, **self.params()}


@dataclass(frozen=True, slots=True)
class ProducerEnd:
    """How a producer ended: what the worker counted, and the final text when the producer has it."""

    finish_reason: str  # stop | length | cancelled
    completion_tokens: int | None = None
    accepted_draft_tokens: int = 0  # of completion_tokens, those speculative decoding drafted and the model kept
    reasoning_tokens: int | None = None
    answer: str | None = None  # the whole answer, where it differs from the streamed pieces (the agent's last turn)


class AnswerProducer(QObject):
    """The face every producer shows an answer run."""

    content = Signal(str)  # more of the answer's text
    reasoning = Signal(str)  # more of the model's thinking
    call = Signal(dict)  # a tool call started or changed (engine.agent.ToolCallRecord.as_dict())
    call_finished = Signal(dict)  # a tool call ended: its step is saved at once
    notice = Signal(str)  # something the person should know about this answer (a server that stopped)
    sources = Signal(tuple)  # the document passages the worker gave the model (DocSource, ...)
    finished = Signal(ProducerEnd)
    failed = Signal(ApiError)

    def start(self, body: ChatRequestBody) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class StreamProducer(AnswerProducer):
    """One streamed ``/v1/chat/completions`` through the app's API client."""

    def __init__(self, api: HearthApi, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self._stream: ChatStream | None = None
        self._pieces = 0

    def start(self, body: ChatRequestBody) -> None:
        self._stream = self.api.stream_chat(body.to_json())
        self._stream.delta.connect(self._delta)
        self._stream.reasoning.connect(self.reasoning)
        self._stream.documents.connect(self._documents)
        self._stream.finished.connect(self._finished)
        self._stream.failed.connect(self.failed)

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.abort()

    def _delta(self, text: str) -> None:
        self.content.emit(text)

    def _documents(self, documents: ChatDocuments) -> None:
        sources = tuple(
            DocSource(number=s.number, label=s.label, uri=s.uri, path=s.path, score=s.score, text=s.text,
                      page=s.page, heading=s.heading)  # fmt: skip
            for s in documents.sources
        )
        if sources:
            self.sources.emit(sources)

    def _finished(self, result: StreamResult) -> None:
        counted = self._stream.content_events if self._stream is not None else 0
        self.finished.emit(
            ProducerEnd(
                result.finish_reason,
                completion_tokens=result.completion_tokens if result.completion_tokens is not None else counted,
                accepted_draft_tokens=result.accepted_draft_tokens,
            )
        )


__all__ = ["AnswerProducer", "ChatRequestBody", "ProducerEnd", "StreamProducer"]
