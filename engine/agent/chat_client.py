"""One model turn through Hearth's OpenAI-compatible API: ``POST /v1/chat/completions`` with ``tools``,
streamed, assembled into content, thinking and tool calls the way any OpenAI client does it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
        out = ModelTurn()
        calls: dict[int, AssembledCall] = {}
        parser = SseParser()
        payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
        try:
            async with self.http.stream("POST", self.url, json=payload, headers=self.headers) as response:
                if response.status_code >= 400:
                    raw = await response.aread()
                    raise ModelTurnError(_error_message(raw, response.status_code))
                async for piece in response.aiter_bytes():
                    for event in parser.feed(piece):
                        if event == DONE:
                            continue
                        self._apply(json.loads(event), out, calls, on_content, on_reasoning)
                for event in parser.close():
                    if event != DONE:
                        self._apply(json.loads(event), out, calls, on_content, on_reasoning)
        except httpx.TransportError as exc:
            raise ModelTurnError(f"The engine stopped answering ({exc}); try again.") from exc
        out.calls = [calls[i] for i in sorted(calls)]
        return out

    @staticmethod
    def _apply(data: dict, out: ModelTurn, calls: dict[int, AssembledCall], on_content, on_reasoning) -> None:
        if "error" in data:
            err = data["error"]
            raise ModelTurnError(err.get("message", str(err)) if isinstance(err, dict) else str(err))
        if data.get("usage"):
            out.usage = data["usage"]
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if thought:
                out.reasoning += thought
                if on_reasoning:
                    on_reasoning(thought)
            if delta.get("content"):
                out.content += delta["content"]
                if on_content:
                    on_content(delta["content"])
            for tc in delta.get("tool_calls") or ():
                call = calls.setdefault(int(tc.get("index", 0)), AssembledCall())
                if tc.get("id"):
                    call.id = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call.name = fn["name"]
                if fn.get("arguments"):
                    call.arguments += fn["arguments"]
            if choice.get("finish_reason"):
                out.finish_reason = choice["finish_reason"]

    async def close(self) -> None:
        if self._own:
            await self.http.aclose()


def _error_message(raw: bytes, status: int) -> str:
    try:
        err = json.loads(raw).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    except (ValueError, AttributeError):
        pass
    return f"The engine answered HTTP {status}; try again."


__all__ = ["AssembledCall", "ChatClient", "ModelTurn", "ModelTurnError"]
