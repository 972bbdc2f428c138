"""AgentProducer: an answer made by the agent loop of engine.agent, for a chat whose MCP servers are on.

The loop runs on the agent's thread and asks the model through :class:`QtTurnClient` (the app's one
HTTP client). Its thinking, text and tool calls reach the answer run as the producer's signals; each
call waits for the person's decision (``approval_needed``). Stop cancels the loop with its running
calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.agent.service import AgentService
from app.agent.turn_client import QtTurnClient
from app.chat.producer import AnswerProducer, ChatRequestBody, ProducerEnd
from app.net.types import ApiError
from engine.agent import AgentEvent, AgentLoop, AgentResult, ApprovalPolicy, Decision, McpTool, ToolCallRecord

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"


@dataclass
class ApprovalRequest:
    """A call waiting for the person: answer with :meth:`decide` (any thread)."""

    chat_id: int
    call: ToolCallRecord
    tool: McpTool
    future: concurrent.futures.Future

    def decide(self, decision: Decision) -> None:
        if not self.future.done():
            self.future.set_result(decision)


class AgentProducer(AnswerProducer):
    """The agent loop over the chat's MCP servers.

    Args:
        agent: The app's servers and the loop's thread.
        client: The model turns' client (the app's HTTP stack).
        chat_id: The chat answered (its hub, its approvals).
        servers: The MCP servers it uses, by name.
        tool_choice: ``required`` when the chat asks for a tool on the first turn.
    """

    approval_needed = Signal(object)  # ApprovalRequest
    _event = Signal(object)  # AgentEvent, from the loop's thread
    _done = Signal(object)  # AgentResult | BaseException | None

    def __init__(self, agent: AgentService, client: QtTurnClient, chat_id: int, *, servers: tuple[str, ...],
                 tool_choice: str = "auto", parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self.agent = agent
        self.client = client
        self.chat_id = chat_id
        self.servers = servers
        self.tool_choice = tool_choice
        self.pending: list[ApprovalRequest] = []
        self._run = None
        self._ended = False
        self._event.connect(self._on_event)
        self._done.connect(self._on_done)

    def start(self, body: ChatRequestBody) -> None:
        params, messages, model = body.params(), list(body.messages), body.model
        chat_id, names = self.chat_id, self.servers

        async def ask(call: ToolCallRecord, tool: McpTool) -> Decision:
            future: concurrent.futures.Future = concurrent.futures.Future()
            self.approval_needed.emit(ApprovalRequest(chat_id, call, tool, future))
            try:
                return await asyncio.wrap_future(future)
            finally:
                if not future.done():
                    future.cancel()

        servers = self.agent.servers
        approval = ApprovalPolicy(ask, always=set(servers.always_allowed()),
                                  on_always=lambda key: servers.set_always_allowed(key, True))  # fmt: skip

        async def run() -> AgentResult:
            hub = await self.agent.hub_for(chat_id, names)
            loop = AgentLoop(self.client, hub, approval, model=model, tool_choice=self.tool_choice,
                             params=params, on_event=self._event.emit)  # fmt: skip
            return await loop.run(messages)

        def done(future: concurrent.futures.Future) -> None:
            try:
                self._done.emit(future.result())
            except (concurrent.futures.CancelledError, asyncio.CancelledError):
                self._done.emit(None)  # stopped before the loop began
            except BaseException as exc:  # noqa: BLE001 - reported on the GUI thread as the answer's error
                self._done.emit(exc)

        self._run = self.agent.runtime.start(run())
        self._run.future.add_done_callback(done)

    def stop(self) -> None:
        """Stop the loop and its running calls; what finished is kept."""
        if self._run is not None and not self._ended:
            self.deny_pending()
            self._run.stop()

    def track(self, request: ApprovalRequest) -> None:
        self.pending.append(request)

    def deny_pending(self) -> None:
        for request in self.pending:
            request.decide(Decision.DENY)

    # -- on the GUI thread ------------------------------------------------------------------------
    def _on_event(self, event: AgentEvent) -> None:
        if self._ended:
            return
        if event.kind == "thinking":
            self.reasoning.emit(event.text)
        elif event.kind == "content":
            self.content.emit(event.text)
        elif event.kind in ("call_started", "call_finished") and event.call is not None:
            (self.call if event.kind == "call_started" else self.call_finished).emit(event.call.as_dict())
            self.pending = [r for r in self.pending if not r.future.done()]
        elif event.kind == "server_failed":
            self.notice.emit(f"MCP server {event.server} is not running; the chat goes on without it.\n{event.text}")
        elif event.kind == "round_limit":
            self.notice.emit(event.text)

    def _on_done(self, result: AgentResult | BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        self.deny_pending()
        if result is None:
            self.finished.emit(ProducerEnd("cancelled"))
        elif isinstance(result, BaseException):
            self.failed.emit(ApiError(f"The tools could not run ({result}); check the MCP servers.", code="agent_error", endpoint=ENDPOINT))
        elif result.stopped:
            self.finished.emit(ProducerEnd("cancelled"))
        elif result.error:
            self.failed.emit(ApiError(result.error, code="agent_error", endpoint=ENDPOINT))
        else:
            self.finished.emit(
                ProducerEnd(
                    "stop",
                    completion_tokens=result.completion_tokens or None,
                    reasoning_tokens=result.reasoning_tokens or None,
                    answer=result.answer or None,
                )
            )


__all__ = ["AgentProducer", "ApprovalRequest"]
