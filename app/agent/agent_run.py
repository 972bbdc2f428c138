"""AgentAnswerRun: an answer in a chat whose MCP servers are on — the agent loop of engine.agent,
with its thinking and tool calls shown as they happen and each call approved in a dialog.

Same face as :class:`app.chat.answer_run.AnswerRun` (``start``, ``stop``, ``finished``), so the
controller runs either. Stop cancels the loop with its running calls; the steps that finished are
kept in the chat store with the text so far.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, QTimer, Signal

from app.agent.service import AgentService
from app.chat.answer_run import AnswerOutcome
from app.chat.context import fit_history
from app.chat.conversation_model import ConversationModel
from app.net.api import HearthApi
from app.net.types import ApiError
from app.store.chat_store import ChatStore
from app.store.records import AnswerStats, AnswerSteps, ChatRecord, MessageRecord
from engine.agent import AgentEvent, AgentLoop, ApprovalPolicy, ChatClient, Decision, McpTool, ToolCallRecord

log = logging.getLogger(__name__)

SAVE_INTERVAL_MS = 500


@dataclass
class ApprovalRequest:
    """A call waiting for the user: answer with :meth:`decide` (any thread)."""

    chat_id: int
    call: ToolCallRecord
    tool: McpTool
    future: concurrent.futures.Future

    def decide(self, decision: Decision) -> None:
        if not self.future.done():
            self.future.set_result(decision)


class AgentAnswerRun(QObject):
    finished = Signal(AnswerOutcome)
    approval_needed = Signal(object)  # ApprovalRequest
    steps_changed = Signal(int)  # message id
    _event = Signal(object)  # AgentEvent, from the loop's thread
    _done = Signal(object)  # AgentResult | BaseException

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
        agent: AgentService,
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
        self.agent = agent
        self.steps = AnswerSteps()
        self.text = ""
        self.pending: list[ApprovalRequest] = []
        self._run = None
        self._t0 = 0.0
        self._t_first: float | None = None
        self._t_think: float | None = None
        self._finished = False
        self._dirty = False
        self._event.connect(self._on_event)
        self._done.connect(self._on_done)
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(SAVE_INTERVAL_MS)
        self._save_timer.timeout.connect(self._save_partial)

    @property
    def chat_id(self) -> int:
        return self.chat.id

    def start(self) -> None:
        settings = self.chat.settings
        fit = fit_history(
            self.history, system_prompt=settings.system_prompt, context_length=self.context_length,
            max_tokens=settings.sampling.max_tokens, thinking=self.store.thinking(self.chat.id),
        )  # fmt: skip
        self.answer = replace(self.answer, stats=AnswerStats(model=settings.model, dropped_messages=fit.dropped))
        self.conversation.replace(self.answer, streaming=True)
        params: dict = {"temperature": settings.sampling.temperature, "top_p": settings.sampling.top_p}
        if settings.sampling.max_tokens:
            params["max_tokens"] = settings.sampling.max_tokens
        if settings.sampling.seed is not None:
            params["seed"] = settings.sampling.seed
        params.update(self.agent.request_fields(self.chat.id))
        engine = self.api.engine
        messages = list(fit.messages)
        chat_id = self.chat.id
        tool_choice = "required" if self.agent.tool_first(chat_id) else "auto"

        async def ask(call: ToolCallRecord, tool: McpTool) -> Decision:
            future: concurrent.futures.Future = concurrent.futures.Future()
            self.approval_needed.emit(ApprovalRequest(chat_id, call, tool, future))
            try:
                return await asyncio.wrap_future(future)
            finally:
                if not future.done():
                    future.cancel()

        approval = ApprovalPolicy(
            ask, always=set(self.agent.servers.always_allowed()),
            on_always=lambda key: self.agent.servers.set_always_allowed(key, True),
        )  # fmt: skip

        async def run():
            client = ChatClient(engine.root_url + "/v1", api_key=engine.token or None)
            try:
                hub = await self.agent.hub_for(chat_id)
                loop = AgentLoop(client, hub, approval, model=settings.model, tool_choice=tool_choice,
                                 params=params, on_event=self._event.emit)  # fmt: skip
                return await loop.run(messages)
            finally:
                await client.close()

        def done(future: concurrent.futures.Future) -> None:
            try:
                self._done.emit(future.result())
            except (concurrent.futures.CancelledError, asyncio.CancelledError):
                self._done.emit(None)  # stopped before the loop began
            except BaseException as exc:  # noqa: BLE001 - reported on the GUI thread as the answer's error
                self._done.emit(exc)

        self._t0 = time.perf_counter()
        self._run = self.agent.runtime.start(run())
        self._run.future.add_done_callback(done)
        self._save_timer.start()

    def stop(self) -> None:
        """Stop the loop and its running calls; the finished steps and the text so far are kept."""
        if self._run is not None and not self._finished:
            for request in self.pending:
                request.decide(Decision.DENY)
            self._run.stop()

    # -- events (GUI thread) ------------------------------------------------------------------
    def _on_event(self, event: AgentEvent) -> None:
        if self._finished:
            return
        if event.kind == "thinking":
            if self._t_think is None:
                self._t_think = time.perf_counter()
            self.steps.reasoning += event.text
            self.steps.thinking_tokens += 1
            self.steps.thinking_seconds = time.perf_counter() - self._t_think
            self._dirty = True
        elif event.kind == "content":
            if self._t_first is None:
                self._t_first = time.perf_counter()
            if self.steps.reasoning and not self.steps.thinking_done:
                self.steps.thinking_done = True  # the answer began: the thinking folds away
            self.text += event.text
            self._dirty = True
            self.conversation.replace(replace(self.answer, content=self.text), streaming=True)
        elif event.kind in ("call_started", "call_finished") and event.call is not None:
            self.steps.upsert_call(event.call.as_dict())
            if event.kind == "call_finished":
                self.store.save_steps(self.answer.id, self.steps)  # every finished step is kept
            self.pending = [r for r in self.pending if not r.future.done()]
        elif event.kind == "server_failed":
            self.steps.notices.append(f"MCP server {event.server} is not running; the chat goes on without it.\n{event.text}")
        elif event.kind == "round_limit":
            self.steps.notices.append(event.text)
        elif event.kind == "turn_end" and self.steps.reasoning:
            self.steps.thinking_done = True
        self.steps_changed.emit(self.answer.id)

    def track(self, request: ApprovalRequest) -> None:
        self.pending.append(request)

    def _save_partial(self) -> None:
        if self._dirty and not self._finished:
            self._dirty = False
            self.store.update_message(self.answer.id, self.text, self._stats(None), steps=self._kept_steps())

    def _kept_steps(self) -> AnswerSteps | None:
        return None if self.steps.empty else self.steps

    def _stats(self, finish_reason: str | None, error: str | None = None, tokens: int | None = None) -> AnswerStats:
        now = time.perf_counter()
        if tokens is None:  # while it streams: about four characters a token
            tokens = max(1, len(self.text) // 4) if self.text else 0
        ttft = (self._t_first - self._t0) if self._t_first is not None else None
        tps = tokens / max(now - self._t_first, 1e-3) if self._t_first is not None and tokens > 1 else None
        return replace(self.answer.stats, tokens=tokens, ttft=ttft, tokens_per_second=tps,
                       finish_reason=finish_reason, error=error)  # fmt: skip

    def _on_done(self, result) -> None:
        if self._finished:
            return
        self._finished = True
        self._save_timer.stop()
        for request in self.pending:
            request.decide(Decision.DENY)
        error: ApiError | None = None
        if isinstance(result, BaseException) or result is None:
            message = f"The tools could not run ({result}); check the MCP servers." if result else "Stopped."
            reason = "cancelled" if result is None else "error"
            stats = self._stats(reason, None if result is None else message)
            if result is not None:
                error = ApiError(message, status=0, code="agent_error", endpoint="/v1/chat/completions")
        elif result.stopped:
            stats = self._stats("cancelled")
        elif result.error:
            stats = self._stats("error", result.error)
            error = ApiError(result.error, status=0, code="agent_error", endpoint="/v1/chat/completions")
        else:
            self.text = result.answer or self.text
            stats = self._stats("stop", tokens=result.completion_tokens or None)
            if result.reasoning_tokens:
                self.steps.thinking_tokens = result.reasoning_tokens
        if self.steps.reasoning:
            self.steps.thinking_done = True
        self.answer = replace(self.answer, content=self.text, stats=stats)
        self.store.update_message(self.answer.id, self.text, stats, steps=self._kept_steps())
        self.conversation.replace(self.answer, streaming=False)
        self.steps_changed.emit(self.answer.id)
        self.finished.emit(AnswerOutcome(self.chat.id, self.answer, error))


__all__ = ["AgentAnswerRun", "ApprovalRequest"]
