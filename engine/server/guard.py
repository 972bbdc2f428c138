"""The pure-ASGI gate in front of every route: Host, Origin, key, and the body's size and shape.

It runs before FastAPI reads a byte of the body, so a refused request costs nothing, and every refusal
is shaped as the dialect that owns the path shapes its errors (Anthropic's and Ollama's clients read
their own). :mod:`engine.server.access` says what is allowed; this module only applies it.

A JSON body may hold at most :data:`MAX_JSON_VALUES` values. FastAPI parses and validates a body on the event
loop, and pydantic's validation holds the GIL: a body within the size limit made of millions of tiny values (an
array of ones, 250,000 one-word messages) stopped every stream of the worker for 1-1.4 s. A body that could hold
more is counted first, off the event loop, and refused when it does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import anyio
from starlette.middleware.cors import CORSMiddleware

from engine.server.access import (
    ADMIN_SCOPE_KEY,
    LOADS_SCOPE_KEY,
    HostAllowlist,
    KeyCheck,
    KeyRing,
    OriginAllowlist,
    host_name,
    route_access,
)
from engine.server.dialect import error_body_for_path
from engine.server.errors import error_body
from engine.settings import ServerSettings

__all__ = ["RequestGuard"]

_SHOWN = 100  # characters of a refused Host or Origin repeated in the message

#: Most values (objects, arrays, strings, numbers...) a JSON body may hold: far over what a request needs
#: (2,048 embedding inputs, a conversation of thousands of messages with their parts, a tool list with schemas).
MAX_JSON_VALUES = 100_000
#: Seconds a request body may go without a byte before it is refused (408): a client that announces a body and
#: stops sending holds its connection and its task for as long as it likes otherwise.
BODY_IDLE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the gate answers itself: status, one sentence, OpenAI's error type and code."""

    status: int
    message: str
    type: str
    code: str
    headers: tuple[tuple[bytes, bytes], ...] = ()


def _shown(raw: bytes) -> str:
    return raw.decode("latin-1")[:_SHOWN].replace("'", "")


def host_refusal(host: bytes) -> Refusal:
    name = host_name(_shown(host))
    return Refusal(
        403,
        f"Host '{name}' is not allowed; start Hearth with --allowed-host {name} to serve it by that name.",
        "permission_error",
        "host_not_allowed",
    )


def origin_refusal(origin: bytes) -> Refusal:
    if origin.strip().lower() == b"null":
        message = (
            "Requests from sandboxed or file:// pages (Origin: null) are not allowed; serve the page from "
            "an http(s) origin and start Hearth with --cors-origin set to it."
        )
    else:
        shown = _shown(origin)
        message = f"Requests from the web page at '{shown}' are not allowed; start Hearth with --cors-origin {shown} to let it in."
    return Refusal(403, message, "permission_error", "origin_not_allowed")


MISSING_KEY = Refusal(
    401,
    "Missing or wrong API key; send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
    "invalid_request_error",
    "invalid_api_key",
    headers=((b"www-authenticate", b"Bearer"),),
)
ADMIN_KEY_NEEDED = Refusal(
    403,
    "This key can only run models; admin routes need the admin key.",
    "permission_error",
    "admin_key_required",
)


def too_large(limit: int) -> Refusal:
    return Refusal(
        413,
        f"The request body is larger than {limit} bytes; send less.",
        "invalid_request_error",
        "request_too_large",
    )


def body_too_slow(seconds: float) -> Refusal:
    return Refusal(
        408,
        f"The request body stopped arriving for {seconds:g} seconds; send the whole body at once.",
        "invalid_request_error",
        "request_timeout",
        headers=((b"connection", b"close"),),
    )


def too_crowded(most: int = MAX_JSON_VALUES) -> Refusal:
    return Refusal(
        413,
        f"The request body holds more than {most:,} JSON values; send fewer items, or split them over several requests.",
        "invalid_request_error",
        "request_too_large",
    )


# A surrogate's escape that is one (after an even run of backslashes, or none): a high one with or without its low
# one after it, or a low one alone; group 1 is the run of escaped backslashes before it, group 2 the escape's digits
_SURROGATE_ESCAPES = re.compile(rb"(?<!\\)((?:\\\\)*)\\u([dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|[dD][c-fC-F][0-9a-fA-F]{2})")
_ANY_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
#: A body from which size its surrogates are mended off the event loop.
MEND_OFF_LOOP_BYTES = 256 * 1024


def mend_surrogates(body: bytes) -> bytes:
    """The JSON document ``body`` with each escaped lone UTF-16 surrogate (``\\ud800``: valid JSON, but no
    character, so every later encoding of the text to UTF-8 would fail: a grammar's, a database's, the answer's
    own) escaped as U+FFFD, the replacement character, instead: the same length, the same document otherwise."""
    if _ANY_SURROGATE.search(body) is None:  # no surrogate escape at all: the common body, at C speed
        return body
    return _SURROGATE_ESCAPES.sub(lambda m: m.group(1) + b"\\ufffd" if len(m.group(2)) == 4 else m.group(), body)


def json_values_over(body: bytes, most: int = MAX_JSON_VALUES) -> bool:
    """Whether the JSON document ``body`` holds more than ``most`` values, itself and every value inside (object
    keys are not counted). False for a body that is not JSON: the app says what is wrong with it."""
    # Each container of k values holds k - 1 commas: 1 + commas + containers bounds the count (commas and
    # brackets inside strings only raise the bound), and most bodies are answered by it without parsing.
    if 1 + body.count(b",") + body.count(b"[") + body.count(b"{") <= most:
        return False
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return False
    count, stack = 0, [doc]
    while stack:
        value = stack.pop()
        count += 1
        if isinstance(value, dict | list):
            if count + len(value) > most:
                return True
            stack.extend(value.values() if isinstance(value, dict) else value)
    return count > most


def _json_start(chunks: list[bytes]) -> bool | None:
    """Whether a body starting with ``chunks`` is JSON text (an object or an array); None while only blanks came."""
    for chunk in chunks:
        head = chunk.lstrip()
        if head:
            return head[:1] in (b"{", b"[")
    return None


class PageCORS(CORSMiddleware):
    """CORS for the pages the guard lets in (:class:`OriginAllowlist`: loopback pages, as Ollama's default, and
    the ``--cors-origin`` list): any request header (the SDKs' ``x-stainless-*``, ``anthropic-*``), every
    method, and the headers a page needs to read (``Retry-After``, the max-tokens cap) exposed."""

    def __init__(self, app, settings: ServerSettings) -> None:
        from engine.server.request_caps import MAX_TOKENS_CAP_HEADER

        super().__init__(app, allow_origins=("*",) if "*" in settings.cors_origins else (), allow_methods=("*",),
                         allow_headers=("*",), expose_headers=("Retry-After", MAX_TOKENS_CAP_HEADER, "X-Request-Id", "Request-Id"),
                         allow_private_network=True)  # fmt: skip
        self.origins = OriginAllowlist(settings.cors_origins)

    def is_allowed_origin(self, origin: str) -> bool:
        return self.origins.allows(origin)


class _Refused(Exception):
    """Raised from the app's ``receive`` when the body passes a limit, to stop it reading."""


def is_upload(scope) -> bool:
    """Whether the request sends a file to be kept (Ollama's ``POST /api/blobs/sha256:...``, an admin route): its body
    has no size limit but the disk's, and goes to the route as it comes, never gathered as JSON."""
    return scope.get("method") == "POST" and scope["path"].startswith("/api/blobs/")


class RequestGuard:
    """Pure-ASGI middleware: refuses a foreign Host or Origin (403), a missing or wrong key (401), an
    inference key on an admin route (403), a body over the limit (413, also when it comes chunked) and a body
    that stops arriving (408)."""

    def __init__(self, app, settings: ServerSettings, *, body_seconds: float = BODY_IDLE_SECONDS) -> None:
        self.app = app
        self.body_seconds = body_seconds
        self.hosts = HostAllowlist(settings)
        self.origins = OriginAllowlist(settings.cors_origins)
        self.keys = KeyRing(settings)
        self.max_body = settings.max_body_bytes

    async def _reject(self, send, refusal: Refusal, scope, origin: bytes | None = None, kind: str = "http") -> None:
        """The refusal's answer, in the shape of the dialect the request is in; to a page the guard lets in (a wrong
        key, a body too large), with CORS's header, so the page can read why. ``kind`` "websocket": the answer to a
        WebSocket's opening handshake."""
        cors = [(b"access-control-allow-origin", origin), (b"vary", b"Origin")] if origin is not None else []
        shaped = error_body_for_path(scope["path"], refusal.status, refusal.message, scope.get("headers") or ())
        body = json.dumps(
            shaped if shaped is not None else error_body(refusal.message, refusal.type, code=refusal.code)
        )
        encoded = body.encode()
        await send(
            {
                "type": "http.response.start" if kind == "http" else "websocket.http.response.start",
                "status": refusal.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(encoded)).encode()),
                    *refusal.headers,
                    *cors,
                ],
            }
        )
        await send({"type": "http.response.body" if kind == "http" else "websocket.http.response.body", "body": encoded})

    async def _refuse_socket(self, scope, receive, send, refusal: Refusal) -> None:
        """A WebSocket refused before it opens: the refusal over HTTP where the server can answer so (uvicorn can),
        else a plain refusal of the handshake (403)."""
        if (await receive())["type"] != "websocket.connect":
            return
        if "websocket.http.response" in (scope.get("extensions") or {}):
            await self._reject(send, refusal, scope, self._page(scope, refusal), kind="websocket")
        else:
            await send({"type": "websocket.close", "code": 1008})

    def _page(self, scope, refusal: Refusal) -> bytes | None:
        """The ``Origin`` of a page this refusal may be read by: one the guard lets in, refused for another reason."""
        if refusal.code in ("host_not_allowed", "origin_not_allowed"):
            return None
        origin = next((v for k, v in scope.get("headers") or () if k == b"origin"), None)
        return origin if origin is not None and self.origins.allows(origin.decode("latin-1")) else None

    def refusal(self, scope) -> Refusal | None:
        """Why the gate answers this request itself (None: the app serves it)."""
        hosts, origins, tokens, length, preflight = [], [], [], None, False
        for name, value in scope.get("headers") or ():
            if name == b"host":
                hosts.append(value)
            elif name == b"origin":
                origins.append(value)
            elif name == b"authorization":
                if value[:7].lower() == b"bearer ":
                    tokens.append(value[7:].strip())
            elif name == b"x-api-key":  # Anthropic's SDK
                tokens.append(value.strip())
            elif name == b"content-length":
                length = value
            elif name == b"access-control-request-method":
                preflight = True
        for host in hosts:  # a request without Host (HTTP/1.0) is no browser's
            if not self.hosts.allows(host.decode("latin-1")):
                return host_refusal(host)
        for origin in origins:
            if not self.origins.allows(origin.decode("latin-1")):
                return origin_refusal(origin)
        method = "WEBSOCKET" if scope["type"] == "websocket" else scope.get("method", "GET")
        if method == "OPTIONS" and preflight and origins:  # a CORS preflight carries no key; CORS answers it
            return None
        tokens = [t for t in tokens if t]
        check = self.keys.check(route_access(method, scope["path"]), tokens)
        scope[ADMIN_SCOPE_KEY] = self.keys.holds_admin(tokens)
        scope[LOADS_SCOPE_KEY] = self.keys.owns_loads(tokens)
        if check is KeyCheck.MISSING:
            return MISSING_KEY
        if check is KeyCheck.INFERENCE_ONLY:
            return ADMIN_KEY_NEEDED
        if length is not None and length.isdigit() and int(length) > self.max_body and not is_upload(scope):
            return too_large(self.max_body)
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":  # its opening handshake is checked as a request is; its messages, by the route
            refusal = self.refusal(scope)
            if refusal is not None:
                return await self._refuse_socket(scope, receive, send, refusal)
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = self.refusal(scope)
        if refusal is not None:
            return await self._reject(send, refusal, scope, self._page(scope, refusal))
        seen = 0
        over: Refusal | None = None
        started = False
        upload = is_upload(scope)
        read = upload  # the body has been handed to the app (an upload's goes to it as it comes)
        limit = 1 << 62 if upload else self.max_body

        body_done = False  # the last of the body arrived; receive() waits for the client to leave after it

        async def next_chunk() -> dict:
            nonlocal seen, over, body_done
            if body_done:
                return await receive()
            try:
                with anyio.fail_after(self.body_seconds):
                    message = await receive()
            except TimeoutError:
                over = body_too_slow(self.body_seconds)
                raise _Refused() from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                seen += len(message.get("body", b""))
                if seen > limit:
                    over = too_large(limit)
                    raise _Refused()
            return message

        async def limited_receive():
            nonlocal over, read
            if read:
                return await next_chunk()
            # the body: a JSON one whole, counted when it could hold too many values; anything else as it comes
            chunks: list[bytes] = []
            while True:
                message = await next_chunk()
                if message["type"] != "http.request":
                    return message  # the client left
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
                is_json = _json_start(chunks)
                if not more or is_json is False:
                    break
            read = True
            if is_json is False:
                return {**message, "body": b"".join(chunks)}
            while more:
                message = await next_chunk()
                if message["type"] != "http.request":
                    return message
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            if len(body) > 2 * MAX_JSON_VALUES and await anyio.to_thread.run_sync(json_values_over, body):
                over = too_crowded()
                raise _Refused()
            if len(body) > MEND_OFF_LOOP_BYTES:
                body = await anyio.to_thread.run_sync(mend_surrogates, body)
            else:
                body = mend_surrogates(body)
            return {"type": "http.request", "body": body, "more_body": False}

        async def guarded_send(message):
            nonlocal started
            if over is not None:  # what the app made of the refused body (FastAPI answers 400) gives way to the 413
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if over is None:
                raise
        if over is not None and not started:
            await self._reject(send, over, scope, self._page(scope, over))
