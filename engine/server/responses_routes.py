"""OpenAI's Responses API on the same port: ``POST /v1/responses`` (plain and streamed), and
``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` from a bounded
in-memory store that ``previous_response_id`` continues conversations from.

A request becomes one :class:`GenerationRequest` (see :mod:`engine.server.dialect`); errors keep
OpenAI's shape, as chat completions answers them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.exceptions import HTTPException

from engine.errors import InvalidRequest
from engine.server.dialect import DialectRun
from engine.types import ChatMessage, GenerationChunk, GenerationRequest, ResponseFormat, SamplingParams

router = APIRouter(prefix="/v1")

STORE_MAX_RESPONSES = 256
STORE_MAX_CHARS = 32_000_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class ResponsesBody(_Body):
    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] = ""
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    stream: StrictBool = False
    store: StrictBool = True
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A finished response, the conversation it ends (to continue from) and its input items."""

    response: dict
    conversation: tuple[ChatMessage, ...]
    input_items: tuple[dict, ...]

    @property
    def chars(self) -> int:
        return sum(len(m.content) for m in self.conversation) + len(str(self.response)) + len(str(self.input_items))


class ResponseStore:
    """The last responses kept for ``previous_response_id`` and ``GET``: at most ``max_responses``,
    and at most ``max_chars`` of text together; the oldest go first. Thread-safe."""

    def __init__(self, max_responses: int = STORE_MAX_RESPONSES, max_chars: int = STORE_MAX_CHARS) -> None:
        self.max_responses = max_responses
        self.max_chars = max_chars
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, rid: str, stored: StoredResponse) -> None:
        with self._lock:
            self._items[rid] = stored
            self._chars += stored.chars
            while self._items and (len(self._items) > self.max_responses or self._chars > self.max_chars):
                _, old = self._items.popitem(last=False)
                self._chars -= old.chars

    def get(self, rid: str) -> StoredResponse | None:
        with self._lock:
            return self._items.get(rid)

    def delete(self, rid: str) -> bool:
        with self._lock:
            old = self._items.pop(rid, None)
            if old is not None:
                self._chars -= old.chars
            return old is not None

    def __len__(self) -> int:
        return len(self._items)


def _store(request: Request) -> ResponseStore:
    state = request.app.state
    if getattr(state, "responses", None) is None:
        state.responses = ResponseStore()
    return state.responses


def _found(request: Request, rid: str) -> StoredResponse:
    stored = _store(request).get(rid)
    if stored is None:
        raise HTTPException(
            404, f"No stored response has id '{rid}'; responses are kept in memory until the worker restarts (not with store: false)."
        )
    return stored


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be text or a list of content parts.", param="input")
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind in ("input_image", "input_file", "input_audio"):
            raise InvalidRequest(f"{where}.content[{j}] is {kind}; Hearth's models here read text only.", param="input")
        elif kind != "refusal":
            raise InvalidRequest(f"{where}.content[{j}] has type '{kind}', which Hearth does not support.", param="input")
    return "".join(parts)


def _input_items(body: ResponsesBody) -> list[dict]:
    if isinstance(body.input, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": body.input}]}] if body.input else []
    return [dict(item) for item in body.input]


def _input_messages(items: list[dict]) -> list[ChatMessage]:
    out = []
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        where = f"input[{i}]"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise InvalidRequest(f"{where}.role must be user, assistant, system or developer.", param="input")
            out.append(ChatMessage("system" if role == "developer" else role, _content_text(item.get("content"), where)))
        elif kind == "reasoning":
            continue  # earlier turns' reasoning is not sent back to the model
        else:
            raise InvalidRequest(f"{where} has type '{kind}', which Hearth does not support.", param="input")
    return out


def _format(text: dict[str, Any] | None) -> ResponseFormat:
    fmt = (text or {}).get("format") or {"type": "text"}
    kind = fmt.get("type")
    if kind == "text":
        return ResponseFormat()
    if kind == "json_object":
        return ResponseFormat(type="json_object")
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidRequest("text.format of type json_schema needs a 'schema' object.", param="text.format")
        return ResponseFormat(type="json_schema", schema=fmt["schema"])
    raise InvalidRequest("text.format.type must be text, json_object or json_schema.", param="text.format")


@dataclass
class _Turn:
    """One request, translated: what to generate and what to echo and store."""

    body: ResponsesBody
    rid: str
    req: GenerationRequest
    history: tuple[ChatMessage, ...]  # the conversation without this request's instructions
    input_items: list[dict]
    created_at: int


def _turn(request: Request, body: ResponsesBody) -> _Turn:
    earlier: tuple[ChatMessage, ...] = ()
    if body.previous_response_id:
        earlier = _found(request, body.previous_response_id).conversation
    items = _input_items(body)
    for item in items:
        if item.get("type", "message") == "message":
            item.setdefault("type", "message")
            item.setdefault("id", f"msg_{uuid.uuid4().hex}")
    history = earlier + tuple(_input_messages(items))
    system = (ChatMessage("system", body.instructions),) if body.instructions else ()
    if not history:
        raise InvalidRequest("'input' is empty; send some text or input items.", param="input")
    if body.max_output_tokens is not None and body.max_output_tokens < 1:
        raise InvalidRequest("'max_output_tokens' must be at least 1.", param="max_output_tokens")
    params = SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        max_tokens=body.max_output_tokens,
    )
    req = GenerationRequest(model=body.model, messages=system + history, params=params, response_format=_format(body.text))
    return _Turn(body, f"resp_{uuid.uuid4().hex}", req, history, items, int(time.time()))


def _usage(final: GenerationChunk) -> dict:
    return {
        "input_tokens": final.prompt_tokens,
        "input_tokens_details": {"cached_tokens": final.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": final.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": final.prompt_tokens + final.completion_tokens,
    }


def _response(turn: _Turn, model: str, *, status: str, output: list[dict], final: GenerationChunk | None) -> dict:
    body = turn.body
    fmt = (body.text or {}).get("format") or {"type": "text"}
    incomplete = status == "incomplete"
    out = {
        "id": turn.rid,
        "object": "response",
        "created_at": turn.created_at,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": (body.reasoning or {}).get("effort"), "summary": None},
        "store": body.store,
        "temperature": turn.req.params.temperature,
        "text": {"format": fmt},
        "tool_choice": body.tool_choice or "auto",
        "tools": body.tools or [],
        "top_p": turn.req.params.top_p,
        "truncation": "disabled",
        "metadata": body.metadata or {},
    }
    if final is not None:
        out["usage"] = _usage(final)
    if body.user is not None:
        out["user"] = body.user
    return out


def _message_item(mid: str, text: str, status: str) -> dict:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"id": mid, "type": "message", "status": status, "role": "assistant", "content": [part] if text or status != "in_progress" else []}


def _finish(request: Request, turn: _Turn, model: str, text: str, final: GenerationChunk, mid: str) -> dict:
    status = "incomplete" if final.finish_reason == "length" else "completed"
    response = _response(turn, model, status=status, output=[_message_item(mid, text, status)], final=final)
    if turn.body.store:
        conversation = turn.history + (ChatMessage("assistant", text),)
        _store(request).put(turn.rid, StoredResponse(response, conversation, tuple(turn.input_items)))
    return response


@router.post("/responses")
async def create_response(request: Request, body: ResponsesBody):
    turn = _turn(request, body)
    run = await DialectRun(request, turn.req).start()
    mid = f"msg_{uuid.uuid4().hex}"
    if body.stream:
        return StreamingResponse(
            _events(request, run, turn, mid),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    text, final = await run.collect()
    return _finish(request, turn, run.model_name, text, final, mid)


class _Emitter:
    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        import json

        payload = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


async def _events(request: Request, run: DialectRun, turn: _Turn, mid: str) -> AsyncIterator[bytes]:
    emit = _Emitter()
    chunks = run.chunks()
    pending = _response(turn, run.model_name, status="in_progress", output=[], final=None)
    yield emit("response.created", response=pending)
    yield emit("response.in_progress", response=pending)
    yield emit("response.output_item.added", output_index=0, item=_message_item(mid, "", "in_progress"))
    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    yield emit("response.content_part.added", item_id=mid, output_index=0, content_index=0, part=empty)
    parts: list[str] = []
    final = GenerationChunk(finish_reason="stop")
    async for chunk in chunks:
        if chunk.finish_reason == "error":
            failed = {**pending, "status": "failed", "error": {"code": "server_error", "message": chunk.error or "Generation failed."}}
            yield emit("response.failed", response=failed)
            return
        if chunk.text:
            parts.append(chunk.text)
            yield emit("response.output_text.delta", item_id=mid, output_index=0, content_index=0, delta=chunk.text, logprobs=[])
        if chunk.finish_reason is not None:
            final = chunk
    text = "".join(parts)
    done = _finish(request, turn, run.model_name, text, final, mid)
    item = done["output"][0]
    yield emit("response.output_text.done", item_id=mid, output_index=0, content_index=0, text=text, logprobs=[])
    yield emit("response.content_part.done", item_id=mid, output_index=0, content_index=0, part=item["content"][0])
    yield emit("response.output_item.done", output_index=0, item=item)
    yield emit("response.completed" if done["status"] == "completed" else "response.incomplete", response=done)


@router.get("/responses/{rid}")
async def get_response(request: Request, rid: str) -> dict:
    return _found(request, rid).response


@router.delete("/responses/{rid}")
async def delete_response(request: Request, rid: str) -> dict:
    _found(request, rid)
    _store(request).delete(rid)
    return {"id": rid, "object": "response", "deleted": True}


@router.get("/responses/{rid}/input_items")
async def input_items(request: Request, rid: str) -> dict:
    items = list(_found(request, rid).input_items)
    return {
        "object": "list",
        "data": items,
        "first_id": items[0].get("id") if items else None,
        "last_id": items[-1].get("id") if items else None,
        "has_more": False,
    }


__all__ = ["router", "ResponseStore", "StoredResponse"]
