"""AnswerRun: one answer streaming into a chat, measured, and saved as it grows.

The run fits the history, builds the request, lets the controller's preparers add to it, and reads
what its producer (a plain stream or the agent loop) says into one :class:`AnswerSteps` record
(thinking, tool calls, notices, what the preparers added) and the answer's text and sources. The
answer's row exists in the store from the start and is rewritten every half second, so if the app or
the worker dies the answer is kept up to that point. When the worker's model list says the chat's model is
not loaded yet, the answer says "Loading <model>…" until something of it arrives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, QTimer, Signal

from app.chat.context import ContextFit, fit_history
from app.chat.conversation_model import ConversationModel
from app.chat.preparers import AnswerRequest, RequestPreparer
from app.chat.producer import AnswerProducer, ChatRequestBody, ProducerEnd, StreamProducer
from app.net.api import HearthApi
from app.net.types import ApiError, ModelInfo, StatsSnapshot
from app.store.chat_store import ChatStore
from app.store.records import AnswerStats, AnswerSteps, ChatRecord, DocSource, MessageRecord

log = logging.getLogger(__name__)

SAVE_INTERVAL_MS = 500
SHRINK = 0.5  # budget factor per retry when the worker's context size is not known
MAX_RETRIES = 4
CHARS_PER_TOKEN = 4  # a streaming answer's token count, until the worker counts it


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    """A finished answer (stopped, failed or complete) and the error a person should see."""

    chat_id: int
    message: MessageRecord
    error: ApiError | None = None


class AnswerRun(QObject):
    """Streams ``answer`` (an empty assistant message already in the store and the model)."""

    finished = Signal(AnswerOutcome)
    steps_changed = Signal(int)  # message id: its steps grew or changed
    producer_started = Signal(object)  # the AnswerProducer of this attempt (features listen to theirs)

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
        preparers: Sequence[RequestPreparer] = (),
        continuing: bool = False,
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
        self.preparers = tuple(preparers)
        self.fit: ContextFit | None = None
        # Going on with ``answer`` (the last of ``history``, cut off at its token limit): its text and tokens so far
        self.continuing = continuing
        self.text = answer.content if continuing else ""
        self._earlier_chars = len(self.text)
        self._earlier_tokens = (answer.stats.tokens or 0) if continuing and answer.stats else 0
        self.steps = AnswerSteps()  # thinking, tool calls, notices: shown above the answer, kept with it
        self.sources: tuple[DocSource, ...] = ()
        self.producer: AnswerProducer | None = None
        self._retries = 0
        self._t0 = 0.0
        self._t_first: float | None = None
        self._t_think: float | None = None
        self._dirty = False
        self._done = False
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(SAVE_INTERVAL_MS)
        self._save_timer.timeout.connect(self._save_partial)

    @property
    def chat_id(self) -> int:
        return self.chat.id

    def kept_steps(self) -> AnswerSteps | None:
        return None if self.steps.empty else self.steps

    # -- starting -----------------------------------------------------------------------------
    def start(self) -> None:
        request = self._request()
        self.steps.added = list(request.added)
        # the same answer goes on as a plain stream (the agent loop starts answers, it does not continue them)
        chosen = request.producer if request.producer is not None and not self.continuing else None
        p = self.attach(chosen() if chosen is not None else StreamProducer(self.api))
        self._t0 = time.perf_counter()
        p.start(request.body)
        self._save_timer.start()
        self._watch_loading()
        if not self.steps.empty:
            self.steps_changed.emit(self.answer.id)

    def attach(self, producer: AnswerProducer) -> AnswerProducer:
        """Read ``producer`` into this answer (``start`` does it with the preparers' choice)."""
        self.producer = producer
        producer.setParent(self)
        p = producer
        p.content.connect(self._on_content)
        p.reasoning.connect(self._on_reasoning)
        p.call.connect(self._on_call)
        p.call_finished.connect(self._on_call_finished)
        p.notice.connect(self._on_notice)
        p.sources.connect(self._on_sources)
        p.finished.connect(self._on_finished)
        p.failed.connect(self._on_failed)
        self.producer_started.emit(p)
        return p

    def _request(self) -> AnswerRequest:
        settings = self.chat.settings
        self.fit = fit_history(
            self.history,
            system_prompt=settings.system_prompt,
            context_length=self.context_length,
            max_tokens=settings.sampling.max_tokens,
            reasoning=self.store.reasoning_texts(self.chat.id),
        )
        self.answer = replace(self.answer, stats=AnswerStats(model=settings.model, dropped_messages=self.fit.dropped))
        self.conversation.replace(replace(self.answer, content=self.text), streaming=True)
        body = ChatRequestBody.for_chat(settings, list(self.fit.messages))
        body.continue_final_message = self.continuing
        request = AnswerRequest(chat=self.chat, body=body, records=self.fit.records)
        for preparer in self.preparers:
            preparer.prepare(request)
        return request

    def _watch_loading(self) -> None:
        """Ask the worker whether the chat's model is loaded (a remote provider's model is not on its list)."""
        call = self.api.models()
        call.succeeded.connect(self._models_known)
        call.failed.connect(lambda e: log.info("could not tell whether the model is loaded: %s", e.message))

    def _models_known(self, models: list[ModelInfo]) -> None:
        name = self.chat.settings.model
        info = next((m for m in models if m.name == name), None)
        if info is None or info.state == "loaded" or self._done or self._started:
            return
        self.conversation.set_waiting(self.answer.id, f"Loading {name}…")

    @property
    def _started(self) -> bool:
        """Whether anything of the answer arrived (text, thinking, a tool call or a notice)."""
        return self._t_first is not None or self._t_think is not None or bool(self.steps.calls or self.steps.notices)

    def _arrived(self) -> None:
        self.conversation.set_waiting(self.answer.id, "")

    def stop(self) -> None:
        """Stop generating; the text and the steps so far are kept (finish reason ``cancelled``)."""
        if self.producer is not None and not self._done:
            self.producer.stop()

    # -- what the producer says -----------------------------------------------------------------
    def _on_reasoning(self, text: str) -> None:
        if self._t_think is None:
            self._t_think = time.perf_counter()
            self._arrived()
        self.steps.reasoning += text
        self.steps.thinking_tokens += 1
        self.steps.thinking_seconds = time.perf_counter() - self._t_think
        self._dirty = True
        self.steps_changed.emit(self.answer.id)

    def _on_content(self, text: str) -> None:
        if self.steps.reasoning and not self.steps.thinking_done:
            self.steps.thinking_done = True  # the answer began: the thinking folds away
            self.steps_changed.emit(self.answer.id)
        if self._t_first is None:
            self._t_first = time.perf_counter()
            self._arrived()
        self.text += text
        self._dirty = True
        self.conversation.replace(replace(self.answer, content=self.text), streaming=True)

    def _on_call(self, call: dict) -> None:
        self._arrived()
        self.steps.upsert_call(call)
        self.steps_changed.emit(self.answer.id)

    def _on_call_finished(self, call: dict) -> None:
        self.steps.upsert_call(call)
        self.store.save_steps(self.answer.id, self.steps)  # every finished step is kept at once
        self.steps_changed.emit(self.answer.id)

    def _on_notice(self, text: str) -> None:
        self._arrived()
        self.steps.notices.append(text)
        self._dirty = True
        self.steps_changed.emit(self.answer.id)

    def _on_sources(self, sources: tuple) -> None:
        self.sources = tuple(sources)
        self.answer = replace(self.answer, sources=self.sources)
        self.store.update_message(self.answer.id, self.text, sources=self.sources)
        self.conversation.replace(replace(self.answer, content=self.text), streaming=True)

    # -- measuring and saving -------------------------------------------------------------------
    def _stats(self, finish_reason: str | None, tokens: int | None = None, error: str | None = None) -> AnswerStats:
        now = time.perf_counter()
        written = self.text[self._earlier_chars :]  # this run's text (all of it, unless going on with an answer)
        if tokens is None:  # while it streams: about four characters a token
            tokens = max(1, len(written) // CHARS_PER_TOKEN) if written else 0
        ttft = (self._t_first - self._t0) if self._t_first is not None else None
        tps = tokens / max(now - self._t_first, 1e-3) if self._t_first is not None and tokens > 1 else None
        return replace(self.answer.stats, tokens=self._earlier_tokens + tokens, ttft=ttft, tokens_per_second=tps,
                       finish_reason=finish_reason, error=error)  # fmt: skip

    def _save_partial(self) -> None:
        if self._dirty and not self._done:
            self._dirty = False
            self.store.update_message(self.answer.id, self.text, self._stats(None), steps=self.kept_steps())

    # -- ending ---------------------------------------------------------------------------------
    def _on_finished(self, end: ProducerEnd) -> None:
        if end.answer:
            self.text = end.answer
        if end.reasoning_tokens:
            self.steps.thinking_tokens = end.reasoning_tokens
        stats = self._stats(end.finish_reason, end.completion_tokens)
        self._finish(replace(stats, accepted_draft_tokens=end.accepted_draft_tokens), None)

    def _on_failed(self, error: ApiError) -> None:
        if error.code == "context_length_exceeded" and not self.text and self._retries < MAX_RETRIES:
            if self.fit is not None and len(self.fit.messages) > 1 + bool(self.chat.settings.system_prompt):
                self._retries += 1
                self._drop_producer()
                # Ask the worker how long its context really is; halve the budget if it won't say.
                call = self.api.stats()
                call.succeeded.connect(self._retry_with)
                call.failed.connect(lambda _e: self._retry_with(None))
                return
            error = replace(
                error,
                message="Your message alone is longer than this model's context; shorten it or pick a model with a longer context.",
            )
        self._finish(self._stats("error", error=error.message), error)

    def _drop_producer(self) -> None:
        if self.producer is not None:
            self.producer.disconnect(self)
            self.producer.deleteLater()
            self.producer = None

    def _retry_with(self, stats: StatsSnapshot | None) -> None:
        loaded = stats.model(self.chat.settings.model) if stats is not None else None
        if loaded is not None and loaded.n_ctx and loaded.n_ctx < self.context_length:
            self.context_length = loaded.n_ctx
        else:
            self.context_length = int(self.context_length * SHRINK)
        log.info("context exceeded; retrying within %d tokens", self.context_length)
        self.steps = AnswerSteps()
        self.start()

    def _finish(self, stats: AnswerStats, error: ApiError | None) -> None:
        if self._done:
            return
        self._done = True
        self._save_timer.stop()
        if self.steps.reasoning:
            self.steps.thinking_done = True
        self.answer = replace(self.answer, content=self.text, stats=stats, sources=self.sources)
        self.store.update_message(self.answer.id, self.text, stats, steps=self.kept_steps())
        self.conversation.replace(self.answer, streaming=False)
        self.steps_changed.emit(self.answer.id)
        self.finished.emit(AnswerOutcome(self.chat.id, self.answer, error))


__all__ = ["AnswerOutcome", "AnswerRun"]
