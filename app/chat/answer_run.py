"""AnswerRun: one answer streaming into a chat, measured, and saved as it grows.

The answer's row exists in the store from the start and is rewritten every half second, so if
the app or the worker dies the answer is kept up to that point.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, QTimer, Signal

from app.chat.context import ContextFit, fit_history
from app.chat.conversation_model import ConversationModel
from app.net.api import HearthApi
from app.net.chat_stream import ChatStream
from app.net.types import ApiError, StatsSnapshot, StreamResult
from app.store.chat_store import ChatStore
from app.store.records import AnswerStats, AnswerSteps, ChatRecord, MessageRecord

log = logging.getLogger(__name__)

SAVE_INTERVAL_MS = 500
SHRINK = 0.5  # budget factor per retry when the worker's context size is not known
MAX_RETRIES = 4


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    """A finished answer (stopped, failed or complete) and the error a person should see."""

    chat_id: int
    message: MessageRecord
    error: ApiError | None = None


class AnswerRun(QObject):
    """Streams ``answer`` (an empty assistant message already in the store and the model)."""

    finished = Signal(AnswerOutcome)
    steps_changed = Signal(int)  # message id: its thinking grew or folded

    def __init__(
        self,
        *,
        api: HearthApi,
        store: ChatStore,
        conversation: ConversationModel,
        chat: ChatRecord,
        answer: MessageRecord,
        history: list[MessageRecord],
        context_length: int,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.api = api
        self.store = store
        self.conversation = conversation
        self.chat = chat
        self.answer = answer
        self.history = history
        self.context_length = context_length
        self.fit: ContextFit | None = None
        self.text = ""
        self.thinking: AnswerSteps | None = None  # once the model thinks; kept with the answer
        self.extra_body: dict = {}  # more request fields (the chat's thinking switch)
        self._t_think = 0.0
        self._stream: ChatStream | None = None
        self._retries = 0
        self._t0 = 0.0
        self._t_first: float | None = None
        self._events = 0
        self._dirty = False
        self._done = False
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(SAVE_INTERVAL_MS)
        self._save_timer.timeout.connect(self._save_partial)

    @property
    def chat_id(self) -> int:
        return self.chat.id

    def start(self) -> None:
        settings = self.chat.settings
        self.fit = fit_history(
            self.history,
            system_prompt=settings.system_prompt,
            context_length=self.context_length,
            max_tokens=settings.sampling.max_tokens,
            thinking=self.store.thinking(self.chat.id),
        )
        self.answer = replace(
            self.answer, stats=AnswerStats(model=settings.model, dropped_messages=self.fit.dropped)
        )
        self.conversation.replace(self.answer, streaming=True)
        body = {
            "model": settings.model,
            "messages": list(self.fit.messages),
            "temperature": settings.sampling.temperature,
            "top_p": settings.sampling.top_p,
        }
        if settings.sampling.max_tokens:
            body["max_tokens"] = settings.sampling.max_tokens
        if settings.sampling.seed is not None:
            body["seed"] = settings.sampling.seed
        body.update(self.extra_body)
        self._t0 = time.perf_counter()
        self._stream = self.api.stream_chat(body)
        self._stream.delta.connect(self._on_delta)
        self._stream.reasoning.connect(self._on_reasoning)
        self._stream.finished.connect(self._on_finished)
        self._stream.failed.connect(self._on_failed)
        self._save_timer.start()

    def stop(self) -> None:
        """Stop generating; the text so far is kept (finish reason ``cancelled``)."""
        if self._stream is not None and not self._done:
            self._stream.abort()

    # -- stream events ------------------------------------------------------------------------
    def _on_reasoning(self, text: str) -> None:
        """Thinking goes to the answer's steps, shown folded above its text."""
        if self.thinking is None:
            self.thinking = AnswerSteps()
            self._t_think = time.perf_counter()
        self.thinking.reasoning += text
        self.thinking.thinking_tokens += 1
        self.thinking.thinking_seconds = time.perf_counter() - self._t_think
        self._dirty = True
        self.steps_changed.emit(self.answer.id)

    def _on_delta(self, text: str) -> None:
        if self.thinking is not None and not self.thinking.thinking_done:
            self.thinking.thinking_done = True  # the answer began: the thinking folds away
            self.steps_changed.emit(self.answer.id)
        if self._t_first is None:
            self._t_first = time.perf_counter()
        self._events += 1
        self.text += text
        self._dirty = True
        self.conversation.replace(replace(self.answer, content=self.text), streaming=True)

    def _stats(self, finish_reason: str | None, completion_tokens: int | None, error: str | None = None) -> AnswerStats:
        now = time.perf_counter()
        counted = self._stream.content_events if self._stream is not None else self._events
        tokens = completion_tokens if completion_tokens is not None else counted
        ttft = (self._t_first - self._t0) if self._t_first is not None else None
        tps = None
        if self._t_first is not None and tokens > 1:
            tps = tokens / max(now - self._t_first, 1e-3)
        return replace(self.answer.stats, tokens=tokens, ttft=ttft, tokens_per_second=tps, finish_reason=finish_reason, error=error)

    def _save_partial(self) -> None:
        if self._dirty and not self._done:
            self._dirty = False
            self.store.update_message(self.answer.id, self.text, self._stats(None, None), steps=self.thinking)

    def _on_finished(self, result: StreamResult) -> None:
        stats = self._stats(result.finish_reason, result.completion_tokens)
        self._finish(replace(stats, drafted_tokens=result.drafted_tokens), None)

    def _on_failed(self, error: ApiError) -> None:
        if error.code == "context_length_exceeded" and not self.text and self._retries < MAX_RETRIES:
            if self.fit is not None and len(self.fit.messages) > 1 + bool(self.chat.settings.system_prompt):
                self._retries += 1
                # Ask the worker how long its context really is; halve the budget if it won't say.
                call = self.api.stats()
                call.succeeded.connect(self._retry_with)
                call.failed.connect(lambda _e: self._retry_with(None))
                return
            error = replace(
                error,
                message="Your message alone is longer than this model's context; shorten it or pick a model with a longer context.",
            )
        self._finish(self._stats("error", None, error.message), error)

    def _retry_with(self, stats: StatsSnapshot | None) -> None:
        loaded = stats.model(self.chat.settings.model) if stats is not None else None
        if loaded is not None and loaded.n_ctx and loaded.n_ctx < self.context_length:
            self.context_length = loaded.n_ctx
        else:
            self.context_length = int(self.context_length * SHRINK)
        log.info("context exceeded; retrying within %d tokens", self.context_length)
        self.start()

    def _finish(self, stats: AnswerStats, error: ApiError | None) -> None:
        if self._done:
            return
        self._done = True
        self._save_timer.stop()
        if self.thinking is not None:
            self.thinking.thinking_done = True
            self.steps_changed.emit(self.answer.id)
        self.answer = replace(self.answer, content=self.text, stats=stats)
        self.store.update_message(self.answer.id, self.text, stats, steps=self.thinking)
        self.conversation.replace(self.answer, streaming=False)
        self.finished.emit(AnswerOutcome(self.chat.id, self.answer, error))
