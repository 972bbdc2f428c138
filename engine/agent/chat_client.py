"""One model turn through Hearth's OpenAI-compatible API: ``POST /v1/chat/completions`` with ``tools``,
streamed, assembled into content, thinking and tool calls the way any OpenAI client does it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from engine.errors import HearthError
from engine.sse import DONE, SseParser


class ModelTurnError(HearthError):
    """The API refused or broke off a turn (the message is the API's own sentence)."""


@dataclass
class AssembledCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class ModelTurn:
    """What the model said in one turn."""

    content: str = ""
    reasoning: str = ""
    calls: list[AssembledCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


class TurnClient(Protocol):
    """What the agent loop needs of a client: one streamed turn (:class:`ChatClient` over httpx; the
    desktop app has its own over Qt's network stack)."""

    async def turn(
        self,
        body: dict[str, Any],
        *,
        on_content: Callable[[str], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
    ) -> ModelTurn: ...


class TurnAssembler:
    """Builds a :class:`ModelTurn` from a turn's streamed chunks (``chat.completion.chunk`` objects),
    the way any OpenAI client does: content and thinking appended, tool calls by index.

    Args:
        on_content: Called with each piece of the answer's text.
        on_reasoning: Called with each piece of the model's thinking.
    """

    def __init__(
        self,
        *,
        on_content: Callable[[str], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
    ) -> None:
        self.turn = ModelTurn()
        self._calls: dict[int, AssembledCall] = {}
        self._on_content = on_content
        self._on_reasoning = on_reasoning

    def feed(self, data: dict) -> None:
        """Take one chunk. Raises ModelTurnError for an error event."""
        if "error" in data:
            err = data["error"]
            raise ModelTurnError(err.get("message", str(err)) if isinstance(err, dict) else str(err))
        out = self.turn
        if data.get("usage"):
            out.usage = data["usage"]
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if thought:
                out.reasoning += thought
                if self._on_reasoning:
                    self._on_reasoning(thought)
            if delta.get("content"):
                out.content += delta["content"]
                if self._on_content:
                    self._on_content(delta["content"])
            for tc in delta.get("tool_calls") or ():
                call = self._calls.setdefault(int(tc.get("index", 0)), AssembledCall())
                if tc.get("id"):
                    call.id = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call.name = fn["name"]
                if fn.get("arguments"):
                    call.arguments += fn["arguments"]
            if choice.get("finish_reason"):
                out.finish_reason = choice["finish_reason"]

    def result(self) -> ModelTurn:
        self.turn.calls = [self._calls[i] for i in sorted(self._calls)]
        return self.turn


def turn_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as one streamed turn asks for it (with the usage chunk at the end)."""
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


class ChatClient:
    """Streams chat completions from ``base_url`` (``http://host:port/v1``).

    Args:
        base_url: The API's ``/v1`` root.
        api_key: Sent as ``Authorization: Bearer``.
        http: An ``httpx.AsyncClient`` to use (the caller closes it); default: one of our own.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, http: httpx.AsyncClient | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._own = http is None
        self.http = http or httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10))

    async def turn(
        self,
        body: dict[str, Any],
        *,
        on_content: Callable[[str], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
    ) -> ModelTurn:
        """One streamed turn. Raises ModelTurnError with the API's message when it refuses."""
        assembler = TurnAssembler(on_content=on_content, on_reasoning=on_reasoning)
        parser = SseParser()
        try:
            async with self.http.stream("POST", self.url, json=turn_body(body), headers=self.headers) as response:
                if response.status_code >= 400:
                    raw = await response.aread()
                    refused = ModelTurnError(_error_message(raw, response.status_code))
                    refused.code = _error_code(raw)  # (context_length_exceeded: the terminal's chat leaves turns out)
                    raise refused
                async for piece in response.aiter_bytes():
                    for event in parser.feed(piece):
                        if event != DONE:
                            assembler.feed(json.loads(event))
                for event in parser.close():
                    if event != DONE:
                        assembler.feed(json.loads(event))
        except httpx.TransportError as exc:
            raise ModelTurnError(f"The engine stopped answering ({exc}); try again.") from exc
        return assembler.result()

    async def close(self) -> None:
        if self._own:
            await self.http.aclose()


def _error_code(raw: bytes) -> str | None:
    """The API's ``error.code`` in a refusal's body (None where it has none)."""
    try:
        err = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        return None
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, str) else None


def _error_message(raw: bytes, status: int) -> str:
    try:
        err = json.loads(raw).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    except (ValueError, AttributeError):
        pass
    return f"The engine answered HTTP {status}; try again."


__all__ = ["AssembledCall", "ChatClient", "ModelTurn", "ModelTurnError", "TurnAssembler", "TurnClient", "turn_body"]
