"""The agent loop: the model's tool calls run through their MCP servers until it answers.

Each round sends the conversation and the tools to ``/v1/chat/completions``; the calls the model
makes are approved (:mod:`engine.agent.approval`), run concurrently, and their results go back as
``tool`` messages. The loop ends with an answer, or at the round limit with one last turn that
may not call tools (and says so). Stopping cancels the model's stream and every running call;
what finished stays in :attr:`AgentResult.messages`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.agent.approval import ApprovalPolicy, Decision
from engine.agent.chat_client import ModelTurn, ModelTurnError, TurnClient
from engine.agent.sessions import McpHub, McpServerFailed

log = logging.getLogger(__name__)

MAX_ROUNDS = 8
MAX_RESULT_CHARS = 16_000  # what the model gets of one result; the rest is cut, and it is told


@dataclass
class ToolCallRecord:
    """One call as the chat shows it (a card). ``result`` is untrusted text: show it as plain text."""

    id: str
    name: str
    arguments: str
    server: str = ""
    tool: str = ""
    status: str = "pending"  # pending | running | done | error | denied | cancelled
    result: str = ""
    duration: float | None = None
    round: int = 1

    @property
    def is_error(self) -> bool:
        return self.status in ("error", "denied", "cancelled")

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "arguments": self.arguments, "server": self.server,
            "tool": self.tool, "status": self.status, "result": self.result, "duration": self.duration,
            "round": self.round,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """Something the loop did, for a view: ``kind`` is one of ``thinking``, ``content`` (``text``),
    ``turn_end``, ``call_started``, ``call_finished`` (``call``), ``server_failed`` (``server``,
    ``text``: its stderr), ``round_limit`` (``text``), ``error`` (``text``)."""

    kind: str
    text: str = ""
    call: ToolCallRecord | None = None
    server: str = ""


@dataclass
class AgentResult:
    messages: list[dict[str, Any]]  # the conversation, with every finished step appended
    answer: str = ""
    reasoning: str = ""
    calls: list[ToolCallRecord] = field(default_factory=list)
    rounds: int = 0
    round_limit: bool = False
    stopped: bool = False
    completion_tokens: int = 0  # every turn's, as the API counted them
    reasoning_tokens: int = 0
    error: str | None = None
    error_code: str | None = None  # the API's code for ``error`` (``context_length_exceeded``...)


def _assistant(turn: ModelTurn) -> dict[str, Any]:
    """A turn as the assistant message of the history. Its thinking goes with it as
    ``reasoning_content``: the engine shows it to a template that asks for it (Qwen3 keeps the
    thinking of the tool rounds since the last question) and drops it for the others."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.calls:
        message["content"] = turn.content or None
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
        ]
    if turn.reasoning:
        message["reasoning_content"] = turn.reasoning
    return message


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


class AgentLoop:
    """Runs one user turn as an agent.

    Args:
        client: The API client (``/v1/chat/completions``).
        hub: The chat's MCP servers (started).
        approval: Who allows each call.
        model: The model name sent to the API.
        tool_choice: ``auto`` or ``required`` for the first round.
        later_tool_choice: For the rounds after it (``auto``: the model can answer with what the tools
            returned; ``required``: a fixed number of tool rounds, as the benchmark runs).
        max_rounds: Model turns with tools before the last one without.
        params: More request fields (``temperature``, ``max_tokens``, ``seed``, ``chat_template_kwargs``...).
        on_event: Called with every :class:`AgentEvent`, on the loop's thread.
    """

    def __init__(
        self,
        client: TurnClient,
        hub: McpHub,
        approval: ApprovalPolicy,
        *,
        model: str,
        tool_choice: str = "auto",
        later_tool_choice: str = "auto",
        max_rounds: int = MAX_ROUNDS,
        params: dict[str, Any] | None = None,
        on_event: Callable[[AgentEvent], None] | None = None,
        max_result_chars: int = MAX_RESULT_CHARS,
    ) -> None:
        self.client = client
        self.hub = hub
        self.approval = approval
        self.model = model
        self.tool_choice = tool_choice
        self.later_tool_choice = later_tool_choice
        self.max_rounds = max(1, max_rounds)
        self.params = dict(params or {})
        self.on_event = on_event or (lambda e: None)
        self.max_result_chars = max_result_chars

    def _emit(self, kind: str, **kw: Any) -> None:
        try:
            self.on_event(AgentEvent(kind, **kw))
        except Exception:  # a view's bug must not end the loop
            log.exception("agent event handler failed")

    def _report_failures(self) -> None:
        for failure in self.hub.new_failures():
            self._emit("server_failed", server=failure.server, text=failure.stderr or failure.reason)

    async def run(self, messages: list[dict[str, Any]]) -> AgentResult:
        """Run until the model answers; never raises for a refused turn or a stop (see the result)."""
        result = AgentResult(messages=list(messages))
        task = asyncio.current_task()
        try:
            await self._rounds(result)
        except asyncio.CancelledError:
            result.stopped = True
            for call in result.calls:
                if call.status in ("pending", "running"):
                    call.status, call.result = "cancelled", "stopped by the user"
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
        except ModelTurnError as exc:
            result.error, result.error_code = str(exc), exc.code
            self._emit("error", text=str(exc))
        return result

    def _body(self, messages: list[dict[str, Any]], tool_choice: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.params}
        tools = [t.as_openai() for t in self.hub.tools()]
        if tools:
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        return body

    async def _turn(self, result: AgentResult, tool_choice: str) -> ModelTurn:
        def content(text: str) -> None:
            self._emit("content", text=text)

        def thinking(text: str) -> None:
            self._emit("thinking", text=text)

        turn = await self.client.turn(
            self._body(result.messages, tool_choice), on_content=content, on_reasoning=thinking
        )
        result.reasoning += turn.reasoning
        result.completion_tokens += int(turn.usage.get("completion_tokens") or 0)
        details = turn.usage.get("completion_tokens_details") or {}
        result.reasoning_tokens += int(details.get("reasoning_tokens") or 0)
        self._emit("turn_end", text=turn.finish_reason or "")
        return turn

    async def _rounds(self, result: AgentResult) -> None:
        self._report_failures()
        choice = self.tool_choice
        for round_no in range(1, self.max_rounds + 1):
            result.rounds = round_no
            turn = await self._turn(result, choice)
            if not turn.calls:
                result.answer = turn.content
                result.messages.append(_assistant(turn))
                return
            result.messages.append(_assistant(turn))
            records = [self._record(c, round_no) for c in turn.calls]
            result.calls.extend(records)
            await self._run_calls(records)
            for rec in records:
                result.messages.append({"role": "tool", "tool_call_id": rec.id, "content": self._for_model(rec)})
            self._report_failures()
            choice = self.later_tool_choice
        result.round_limit = True
        note = f"Stopped calling tools after {self.max_rounds} rounds (the round limit); the model answers now."
        self._emit("round_limit", text=note)
        turn = await self._turn(result, "none")
        result.rounds += 1
        result.answer = turn.content
        result.messages.append(_assistant(turn))

    def _record(self, call, round_no: int) -> ToolCallRecord:
        tool = self.hub.tool(call.name)
        return ToolCallRecord(
            id=call.id or f"call_{round_no}_{call.name}",
            name=call.name,
            arguments=call.arguments or "{}",
            server=tool.server if tool else "",
            tool=tool.tool if tool else call.name,
            round=round_no,
        )

    def _for_model(self, rec: ToolCallRecord) -> str:
        if rec.status == "denied":
            return f"The user denied this call of {rec.name}; do not call it again for this request."
        if rec.status == "error":
            return truncate(f"Error: {rec.result}", self.max_result_chars)
        return truncate(rec.result, self.max_result_chars)

    async def _run_calls(self, records: list[ToolCallRecord]) -> None:
        # Approvals one at a time (one question on screen), then the allowed calls all at once.
        allowed: list[ToolCallRecord] = []
        for rec in records:
            self._emit("call_started", call=rec)
            tool = self.hub.tool(rec.name)
            if tool is None:
                rec.status, rec.result, rec.duration = "error", f"there is no tool named '{rec.name}'", 0.0
                self._emit("call_finished", call=rec)
                continue
            decision = await self.approval.decide(rec, tool)
            if decision is Decision.DENY:
                rec.status, rec.result, rec.duration = "denied", "denied by the user", 0.0
                self._emit("call_finished", call=rec)
                continue
            allowed.append(rec)
        await asyncio.gather(*(self._execute(rec) for rec in allowed))

    async def _execute(self, rec: ToolCallRecord) -> None:
        try:
            args = json.loads(rec.arguments) if rec.arguments.strip() else {}
        except ValueError as exc:
            rec.status, rec.result, rec.duration = "error", f"the arguments are not valid JSON ({exc})", 0.0
            self._emit("call_finished", call=rec)
            return
        if not isinstance(args, dict):
            rec.status, rec.result, rec.duration = "error", "the arguments must be a JSON object", 0.0
            self._emit("call_finished", call=rec)
            return
        rec.status = "running"
        self._emit("call_started", call=rec)
        t0 = time.perf_counter()
        try:
            out = await self.hub.call(rec.name, args)
            rec.status, rec.result = ("error" if out.is_error else "done"), out.text
        except McpServerFailed as exc:
            rec.status, rec.result = "error", f"the server {exc.server} stopped: {exc.reason}"
        except asyncio.CancelledError:
            rec.status, rec.result = "cancelled", "stopped by the user"
            rec.duration = time.perf_counter() - t0
            self._emit("call_finished", call=rec)
            raise
        rec.duration = time.perf_counter() - t0
        self._emit("call_finished", call=rec)


__all__ = ["AgentEvent", "AgentLoop", "AgentResult", "MAX_ROUNDS", "ToolCallRecord", "truncate"]
