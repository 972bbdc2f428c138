"""Answer producers: where an answer's text, thinking, tool calls and sources come from.

An :class:`app.chat.answer_run.AnswerRun` takes one producer and knows nothing else about it: a
plain streamed chat completion (:class:`StreamProducer`), or the agent loop with its tool calls
(``app.agent.agent_producer.AgentProducer``). A producer emits what it hears and ends with exactly
one of ``finished`` or ``failed``.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.net.api import HearthApi
from app.net.chat_stream import ChatStream
from app.net.types import ApiError, StreamResult
from app.store.records import DocSource
from engine.server.api_models import ChatDocuments


@dataclass(frozen=True, slots=True)
class ProducerEnd:
    """How a producer ended: what the worker counted, and the final text when the producer has it."""

    finish_reason: str  # stop | length | cancelled
    completion_tokens: int | None = None
    drafted_tokens: int = 0
    reasoning_tokens: int | None = None
    answer: str | None = None  # the whole answer, where it differs from the streamed pieces (the agent's last turn)
    estimated_tokens: bool = False  # completion_tokens is unknown: count the pieces


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

    def start(self, body: dict) -> None:
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

    def start(self, body: dict) -> None:
        self._stream = self.api.stream_chat(body)
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
                drafted_tokens=result.drafted_tokens,
            )
        )


__all__ = ["AnswerProducer", "ProducerEnd", "StreamProducer"]
