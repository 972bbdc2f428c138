"""OpenAI's WebSocket mode of the Responses API: a connection to ``ws://host/v1/responses`` that lasts.

A client (the ``openai`` SDK's ``responses.connect()``, the Agents SDK's websocket transport, Codex) sends
``response.create`` events, each the body of ``POST /v1/responses`` with ``"type": "response.create"``, and reads
every response's events as text frames: the events a streamed response sends, in the same order. ``stream`` is
implied and ``background`` refused. The connection stays open through errors: a response that cannot start is
answered ``{"type": "error", "status": N, "error": {...}}``, as OpenAI answers it, in its lane's turn.

- Responses sent without ``stream_id`` run one after another, in the order sent. Those with a ``stream_id`` run in a
  lane of their own (OpenAI's multiplexing): lanes run at once, each in order, and every event of a lane's response
  carries its ``stream_id``. At most :data:`MAX_QUEUED` responses are under way on a connection.
- A response made with ``store: false`` is kept for the connection alone (its newest :data:`KEPT`), so the next
  ``response.create`` continues from it by ``previous_response_id`` and sends only the new items; ``store: true``
  keeps it in the worker's store, as over HTTP.
- ``generate: false`` (or ``prompt_cache_options.prewarm``) prepares a turn: its conversation is kept to continue
  from and its prompt read into the model's cache, with no answer (``response.created``, then
  ``response.completed`` with no output).
- ``response.steer`` is answered ``response.steer.failed`` (``steering_not_supported``): a local model's answer is
  not steered while it is written.

A connection that closes gives up the generations it had under way. The gate checks the connection's Host, Origin
and key before it opens (:mod:`engine.server.guard`); at most :data:`MAX_SOCKETS` are open at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from engine.errors import Overloaded
from engine.server import responses_routes
from engine.server.errors import ErrorInfo, error_info
from engine.server.guard import MAX_JSON_VALUES, MEND_OFF_LOOP_BYTES, json_values_over, mend_surrogates
from engine.server.responses_routes import SOCKET_RESPONSES, ResponsesBody
from engine.server.responses_store import ResponseStore
from engine.server.streaming import KEEPALIVE

router = APIRouter(prefix="/v1")
log = logging.getLogger(__name__)

#: WebSocket connections open at once, all clients together: each may hold responses and their lanes, and past
#: these a new one is refused (503) until some close.
MAX_SOCKETS = 128
#: Responses a connection has asked for and not seen the end of (running, or waiting in their lanes).
MAX_QUEUED = 32
#: Responses made with ``store: false`` a connection keeps to continue from (the newest), and their characters.
KEPT = 8
KEPT_CHARS = 2_000_000
#: Seconds a connection with nothing under way stays open without an event from its client (its pings aside).
IDLE_SECONDS = 3600.0


def _parsed(data: bytes) -> Any:
    return json.loads(mend_surrogates(data).decode())  # (a frame of bytes that is not UTF-8: a ValueError too)


class _Closed(Exception):
    """The client closed the connection."""


#: What a lane runs: a response to make (its body, and whether to generate), or the error that answers a
#: ``response.create`` refused before it ran, sent in its turn.
_Item = tuple[ResponsesBody, bool] | ErrorInfo


class _Connection:
    """One client's WebSocket: its lanes of responses, and the responses it keeps to continue from."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.settings = ws.app.state.settings
        self.own = ResponseStore(KEPT, KEPT_CHARS)
        self.lanes: dict[str | None, asyncio.Queue[_Item]] = {}
        self.tasks: set[asyncio.Task] = set()
        self.queued = 0  # response.create events taken and not yet ended (running, or waiting in their lanes)
        self.gone = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.last = self.loop.time()  # when an event last came, or a response last ended

    async def serve(self) -> None:
        """Read the client's events until it closes, or until it has been idle :data:`IDLE_SECONDS` with nothing
        under way; then end the responses under way."""
        try:
            while True:
                wait = IDLE_SECONDS if self.queued else max(1.0, self.last + IDLE_SECONDS - self.loop.time())
                try:
                    message = await asyncio.wait_for(self.ws.receive(), wait)
                except TimeoutError:
                    if self.queued or self.loop.time() - self.last < IDLE_SECONDS:
                        continue
                    await self.ws.close(code=1000, reason="idle")  # the client opens another when it needs one
                    return
                if message["type"] == "websocket.disconnect":
                    return
                self.last = self.loop.time()
                raw = message.get("text")
                data = raw.encode() if isinstance(raw, str) else message.get("bytes") or b""
                await self._read(data)
        except (WebSocketDisconnect, _Closed):
            return
        finally:
            self.gone.set()
            for task in self.tasks:
                task.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- the client's events ----------------------------------------------------------------------------------
    async def _read(self, data: bytes) -> None:
        most = self.settings.max_body_bytes
        if len(data) > most:
            await self._error(ErrorInfo(413, f"The event is larger than {most:,} bytes; send a smaller one.",
                                        code="request_too_large"))  # fmt: skip
            return
        if len(data) > 2 * MAX_JSON_VALUES and await asyncio.to_thread(json_values_over, data):
            await self._error(ErrorInfo(413, f"The event holds more than {MAX_JSON_VALUES:,} JSON values; send fewer "
                                             "items.", code="request_too_large"))  # fmt: skip
            return
        big = len(data) > MEND_OFF_LOOP_BYTES  # read (and validated) off the event loop, as a large body is
        try:
            event = await asyncio.to_thread(_parsed, data) if big else _parsed(data)
        except (ValueError, RecursionError):
            await self._error(ErrorInfo(400, "The event is not valid JSON in UTF-8; send a JSON object such as "
                                             '{"type": "response.create", ...}.', code="invalid_json"))  # fmt: skip
            return
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "response.create":
            await self._create(event, big)
        elif kind == "response.steer":
            await self._steer_refused(event)
        else:
            shown = f"'{kind}'" if isinstance(kind, str) else "missing"
            await self._error(ErrorInfo(400, f"The event's type is {shown}; send 'response.create' events.",
                                        code="invalid_value", param="type"))  # fmt: skip

    async def _create(self, event: dict[str, Any], big: bool = False) -> None:
        lane = event.pop("stream_id", None)
        if lane is not None and (not isinstance(lane, str) or not lane or len(lane) > 256):
            await self._error(ErrorInfo(400, "'stream_id' must be a string of 1 to 256 characters.", code="invalid_value",
                                        param="stream_id"))  # fmt: skip
            return
        if self.queued >= MAX_QUEUED:  # answered at once, the one refusal that is: it takes no place in the lane
            await self._error(error_info(Overloaded(f"{MAX_QUEUED} responses are already under way on this connection; "
                                                    "wait for one to end, or open another connection.", retry_after=1.0)),
                              lane)  # fmt: skip
            return
        self._enqueue(lane, await self._item(event, big))

    async def _item(self, event: dict[str, Any], big: bool) -> _Item:
        """What a ``response.create`` asks its lane to run: the response, or the error that refuses it."""
        for name in ("type", "stream", "stream_options"):  # a stream is what the socket sends anyway
            event.pop(name, None)
        generate = event.pop("generate", True)
        if generate is not True and generate is not False and generate is not None:
            return ErrorInfo(400, "'generate' must be true or false.", code="invalid_value", param="generate")
        cache = event.get("prompt_cache_options")
        if isinstance(cache, dict) and cache.get("prewarm") is True:  # it overrides generate, as OpenAI's does
            generate = False
        if event.get("background"):
            return ErrorInfo(400, "'background' is not supported over a WebSocket; leave it out (the socket streams "
                                  "every response), or create the response with POST /v1/responses.",
                             code="invalid_value", param="background")  # fmt: skip
        try:
            body = await asyncio.to_thread(ResponsesBody.model_validate, event) if big else ResponsesBody.model_validate(event)
        except ValidationError as exc:
            return error_info(RequestValidationError(exc.errors()))
        return body, generate is not False

    def _enqueue(self, lane: str | None, item: _Item) -> None:
        self.queued += 1
        queue = self.lanes.get(lane)
        if queue is None:
            queue = self.lanes[lane] = asyncio.Queue()
            task = asyncio.create_task(self._lane(lane, queue), name=f"responses socket lane {lane!r}")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        queue.put_nowait(item)

    async def _steer_refused(self, event: dict[str, Any]) -> None:
        said = {"input": event.get("input"), "previous_response_id": event.get("previous_response_id")}
        await self._send({"type": "response.steer.failed", "sequence_number": 0, "steer": said,
                          "error": {"type": "invalid_request_error", "code": "steering_not_supported",
                                    "message": "Hearth does not steer a response while it is written; send the input "
                                               "in the next response.create, with previous_response_id."}})  # fmt: skip

    # -- the responses ----------------------------------------------------------------------------------------
    async def _lane(self, lane: str | None, queue: asyncio.Queue[_Item]) -> None:
        """Run a lane's items in order, until none waits (the lane then ends; a later one starts it again)."""
        try:
            while not queue.empty():
                item = queue.get_nowait()
                try:
                    if isinstance(item, ErrorInfo):
                        await self._error(item, lane)
                    else:
                        await self._respond(*item, lane)
                finally:
                    self.queued -= 1
                    self.last = self.loop.time()
        except _Closed:  # the client went: the connection's reader ends the rest
            pass
        finally:
            self.queued -= queue.qsize()  # (cancelled: those never run)
            if self.lanes.get(lane) is queue:
                del self.lanes[lane]

    def _request(self) -> Request:
        """The request a response is made for: the connection's, as ``POST /v1/responses`` (its key, its client),
        with the connection's own responses to continue from."""
        state = dict(self.ws.scope.get("state") or {})
        state["request_id"] = f"req_{uuid.uuid4().hex}"
        scope = {**self.ws.scope, "type": "http", "method": "POST", "path": "/v1/responses", "raw_path": b"/v1/responses",
                 "query_string": b"", "state": state, SOCKET_RESPONSES: self.own}  # fmt: skip

        async def receive() -> dict:  # nothing to read; the client's leaving, when it goes
            await self.gone.wait()
            return {"type": "http.disconnect"}

        return Request(scope, receive)

    async def _respond(self, body: ResponsesBody, generate: bool, lane: str | None) -> None:
        request = self._request()
        gen = None
        try:
            if generate:
                gen, events = await responses_routes.socket_events(request, body)
            else:
                events = responses_routes.prepared_events(request, body)
            await self._relay(events, lane)
        except (_Closed, asyncio.CancelledError):
            raise
        except Exception as exc:  # before the first event: the error answers the response.create
            await self._error(error_info(exc), lane)
        finally:
            if gen is not None:
                gen.abandon()  # (its chunks, once read, ended it: this gives up one never read)

    async def _relay(self, events: AsyncIterator[bytes], lane: str | None) -> None:
        """Send a response's events (a stream's, as server-sent events) as text frames, each with the lane's id."""
        tail = "}" if lane is None else f',"stream_id":{json.dumps(lane)}}}'
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                if event == KEEPALIVE:  # the socket's own pings keep it alive
                    continue
                data = event[event.index(b"\ndata: ") + 7 :].rstrip(b"\n").decode()
                await self._send_text(data[:-1] + tail)

    # -- sending ----------------------------------------------------------------------------------------------
    async def _error(self, info: ErrorInfo, lane: str | None = None) -> None:
        error: dict[str, Any] = {"type": info.type, "code": info.code, "message": info.message, "param": info.param}
        if info.headers:
            error["headers"] = info.headers
        event: dict[str, Any] = {"type": "error", "status": info.status, "error": error}
        if lane is not None:
            event["stream_id"] = lane
        await self._send(event)

    async def _send(self, event: dict[str, Any]) -> None:
        await self._send_text(json.dumps(event, ensure_ascii=False, separators=(",", ":")))

    async def _send_text(self, text: str) -> None:
        if self.gone.is_set():
            raise _Closed()
        try:
            await self.ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:  # it went while this was sent
            self.gone.set()
            raise _Closed() from exc


@router.websocket("/responses")
async def responses_socket(ws: WebSocket) -> None:
    state = ws.app.state
    open_now = getattr(state, "responses_sockets", 0)
    if open_now >= MAX_SOCKETS:
        message = (f"{MAX_SOCKETS} WebSocket connections are already open to this server; close one, or use POST "
                   "/v1/responses.")  # fmt: skip
        await refuse(ws, ErrorInfo(503, message, "server_error", "too_many_connections"))
        return
    state.responses_sockets = open_now + 1
    try:
        await ws.accept()
        await _Connection(ws).serve()
    finally:
        state.responses_sockets -= 1


async def refuse(ws: WebSocket, info: ErrorInfo) -> None:
    """Refuse a WebSocket before it opens: an HTTP answer with OpenAI's error body where the server can send one
    (uvicorn can), else a plain refusal (403)."""
    if "websocket.http.response" in (ws.scope.get("extensions") or {}):
        await ws.send_denial_response(JSONResponse(info.body(), status_code=info.status, headers=info.headers))
    else:
        await ws.close(code=1013 if info.status == 503 else 1008)


__all__ = ["MAX_QUEUED", "MAX_SOCKETS", "refuse", "router"]
