"""The worker's HTTP connections: a bounded request head that must arrive in time, and room for new clients.

uvicorn's httptools protocol reads a request's head (its request line and headers) with no limit of size or
time. Measured against the worker: one connection sending an endless header grew it by 380 MB for each 300 MB
sent and slowed a concurrent chat from 0.36 to 3.1 s; connections that send half a head, or nothing, are held
forever, and at the usual limit of 1,024 open files a thousand of them locked every other client out.

:class:`HearthHttpProtocol` is that protocol with three bounds:

- a head over :data:`MAX_HEAD_BYTES` is answered 431 and the connection closed;
- a head not complete :data:`HEAD_SECONDS` after its first byte (or after the connection opened) is answered
  408 and the connection closed; a new connection that sends nothing in that time is closed without an answer
  (a client could take one for its next request's), and one idle between requests by uvicorn's keep-alive
  timeout;
- past :func:`connection_cap` open connections, a new one closes the one that has waited longest without a
  request in progress (idle, or still sending its head), else the one that has been sending a request's body
  longest (for over :data:`BODY_GRACE_SECONDS`: a body trickled a byte at a time held its connection for as
  long as the bytes kept coming, and 4,200 of them locked every client out), or is itself answered 503 when
  every connection is serving a request.

:func:`raise_open_file_limit` lifts the soft limit on open files to the hard one (as Go's runtime does), so the
cap rarely has to act.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "BODY_GRACE_SECONDS",
    "HEAD_SECONDS",
    "MAX_HEAD_BYTES",
    "WS_MAX_BYTES",
    "HearthHttpProtocol",
    "connection_cap",
    "protocol_with",
    "raise_open_file_limit",
    "server_config",
]

#: Bytes a request's line and headers may take together (uvicorn's h11 protocol allows 16 KiB, nginx 8-40 KiB).
MAX_HEAD_BYTES = 64 * 1024
#: Seconds a request's head may take to arrive, counted from its first byte or from the connection's opening.
HEAD_SECONDS = 30.0
#: Most open connections at any limit on open files: far beyond what local clients open.
MOST_CONNECTIONS = 4096
#: Seconds a request's body may take before, with the connections at the cap, a new connection closes it.
BODY_GRACE_SECONDS = 1.0
#: Seconds a connection refused for its head still reads (and drops) what the client sends before it closes.
LINGER_SECONDS = 2.0
#: Bytes a WebSocket frame may hold before its connection is closed (1009); --max-body above it raises it.
WS_MAX_BYTES = 16 * 1024 * 1024
#: The soft limit on open files is raised to at most this many.
OPEN_FILES_WANTED = 65536


def _error(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    )
    encoded = body.encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(encoded)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + encoded


def head_too_large(most: int) -> bytes:
    return _error(
        431,
        "Request Header Fields Too Large",
        f"The request's headers are larger than {most // 1024} KiB; send fewer or shorter headers.",
        "headers_too_large",
    )


def head_too_slow(seconds: float) -> bytes:
    return _error(
        408,
        "Request Timeout",
        f"The request's headers did not arrive within {seconds:g} seconds; send the whole request at once.",
        "request_timeout",
    )


TOO_MANY_CONNECTIONS = _error(
    503,
    "Service Unavailable",
    "The server has as many connections open as it can serve; close idle connections or retry shortly.",
    "too_many_connections",
)


UPGRADE_WHILE_BUSY = _error(
    400,
    "Bad Request",
    "A WebSocket upgrade came on a connection whose earlier request is still being answered; open the WebSocket on a "
    "connection of its own.",
    "upgrade_while_busy",
)


def open_file_limit() -> int | None:
    """The soft limit on this process's open files (None where there is none to read)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit on sockets
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_open_file_limit(wanted: int = OPEN_FILES_WANTED) -> int | None:
    """Lift the soft limit on open files toward the hard limit (at most ``wanted``); returns the limit now."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        # macOS refuses a soft limit past OPEN_MAX (10,240) whatever the hard limit says
        for value in (target, 10240) if sys.platform == "darwin" else (target,):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
                break
            except (ValueError, OSError):
                continue
    return open_file_limit()


def connection_cap(limit: int | None = None) -> int:
    """Most open connections: :data:`MOST_CONNECTIONS`, or fewer where the limit on open files (``limit``,
    else this process's) leaves less room beside the files, pipes and databases the worker keeps open."""
    limit = open_file_limit() if limit is None else limit
    if limit is None:
        return MOST_CONNECTIONS
    return max(16, min(MOST_CONNECTIONS, limit - min(256, limit // 4)))


class HearthHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded head, a deadline for it, and a cap on open connections."""

    max_head_bytes = MAX_HEAD_BYTES
    head_seconds = HEAD_SECONDS
    max_connections: int | None = None  # None: connection_cap() when the first connection opens

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._in_head = True  # between requests or inside a head: not serving one
        self._head_bytes = 0
        self._head_tail = b""  # the last bytes of the head so far: its blank line may straddle two chunks
        self._head_timer = None
        self._dropping = False  # answered and closing: what still arrives is read and dropped
        self._head_begun = False  # a byte of the next request's head has come
        waiting = _waiting(self.server_state)
        if len(self.connections) > self._cap():
            oldest = next(iter(waiting), None)
            if oldest is not None:
                oldest._close_waiting()
            else:
                slowest = next(iter(_in_body(self.server_state).items()), None)
                if slowest is None or self.loop.time() - slowest[1] < BODY_GRACE_SECONDS:
                    self._refuse(TOO_MANY_CONNECTIONS)  # every connection is serving a request: refuse this one
                    return
                slowest[0]._close_in_body()
        waiting[self] = None
        self._arm_head_timer()

    def _cap(self) -> int:
        cls = type(self)
        if cls.max_connections is None:
            cls.max_connections = connection_cap()
        return cls.max_connections

    def data_received(self, data: bytes) -> None:
        if self._dropping:
            return
        counted = self._in_head
        if counted and self._head_timer is None:
            self._arm_head_timer()  # a new request's head begins on a kept-alive connection
        if counted:
            # the head's bytes in this chunk: up to the blank line that ends it (a body may follow in the same chunk)
            tail = self._head_tail
            end = (tail + data).find(b"\r\n\r\n") if tail else data.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else end + 4 - len(tail)
            if self._head_bytes > self.max_head_bytes:
                self._answer_and_close(head_too_large(self.max_head_bytes))
                return
            self._head_tail = data[-3:] if end < 0 else b""
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_begun = False
        self._head_bytes = 0
        self._head_tail = b""
        self._cancel_head_timer()
        _waiting(self.server_state).pop(self, None)
        _in_body(self.server_state)[self] = self.loop.time()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        _in_body(self.server_state).pop(self, None)
        super().on_message_complete()
        self._in_head = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._in_head and not self._serving() and not self.transport.is_closing():
            waiting = _waiting(self.server_state)
            waiting.pop(self, None)
            waiting[self] = None  # the newest to wait

    def handle_websocket_upgrade(self) -> None:
        if self._serving() or self.pipeline:  # behind a request still answered: the upgrade would take its connection
            self._answer_and_close(UPGRADE_WHILE_BUSY)  # over, and that request would never see its client leave
            return
        # the connection is the WebSocket protocol's from now on: it leaves this protocol's books (a WebSocket is
        # never closed to make room; engine.server.responses_socket bounds how many are open)
        self._cancel_head_timer()
        _waiting(self.server_state).pop(self, None)
        _in_body(self.server_state).pop(self, None)
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        _waiting(self.server_state).pop(self, None)
        _in_body(self.server_state).pop(self, None)
        super().connection_lost(exc)

    # -- the head's deadline and the way out ------------------------------------------------------
    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_seconds, self._head_deadline)

    def _cancel_head_timer(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _head_deadline(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._in_head:
            return
        if self._serving():  # a head sent behind a response still streaming waits for that response
            self._arm_head_timer()
            return
        if not self._head_begun:  # nothing sent: closed without a word, as an idle kept-alive connection is
            self._close_waiting()
            return
        self._answer_and_close(head_too_slow(self.head_seconds))

    def _answer_and_close(self, response: bytes) -> None:
        self._cancel_head_timer()
        _waiting(self.server_state).pop(self, None)
        if self._serving():  # a head too large behind a streaming response cuts that response too
            self.transport.close()
            return
        self._refuse(response)

    def _refuse(self, response: bytes) -> None:
        # Closing with the client's bytes unread would send a reset, which can reach the client before the answer
        # does: end the writing side, read and drop what still comes for a moment, then close.
        self.transport.write(response)
        self._dropping = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _close_waiting(self) -> None:
        """Close a connection with no request in progress (to make room, or one that never sent a byte)."""
        self._cancel_head_timer()
        _waiting(self.server_state).pop(self, None)
        self.transport.close()

    def _close_in_body(self) -> None:
        """Close a connection whose request's body is still coming (to make room): its request ends unread."""
        _in_body(self.server_state).pop(self, None)
        self.transport.close()


def _in_body(server_state) -> dict[HearthHttpProtocol, float]:
    """The server's connections whose request's body is still coming, with when their head ended, oldest first."""
    in_body = getattr(server_state, "hearth_in_body", None)
    if in_body is None:
        in_body = server_state.hearth_in_body = {}
    return in_body


def _waiting(server_state) -> dict[HearthHttpProtocol, None]:
    """The server's connections with no request in progress, longest waiting first."""
    waiting = getattr(server_state, "hearth_waiting", None)
    if waiting is None:
        waiting = server_state.hearth_waiting = {}
    return waiting


def protocol_with(**bounds: Any) -> type[HearthHttpProtocol]:
    """:class:`HearthHttpProtocol` with other bounds (``max_head_bytes``, ``head_seconds``, ``max_connections``)."""
    unknown = set(bounds) - {"max_head_bytes", "head_seconds", "max_connections"}
    if unknown:
        raise TypeError(f"unknown bounds: {', '.join(sorted(unknown))}")
    return type("BoundedHttpProtocol", (HearthHttpProtocol,), dict(bounds))


def server_config(app, *, protocol: type[HearthHttpProtocol] = HearthHttpProtocol, **options: Any):
    """A uvicorn ``Config`` for ``app`` on the bounded protocol (``options``: uvicorn's own)."""
    import uvicorn
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    # WebSockets (the Responses API's WebSocket mode) on websockets' sans-I/O protocol (the class, not its name: a
    # bundle finds what is imported), uncompressed (the peer is on this machine: compressing each token's frame costs
    # CPU and saves nothing); a frame past ``ws_max_size`` closes its connection (1009), a smaller one past the body
    # limit is answered with an error by the route
    options = {"log_level": "warning", "lifespan": "off", "access_log": False, "ws": WebSocketsSansIOProtocol,
               "ws_per_message_deflate": False, "ws_max_size": WS_MAX_BYTES, **options}  # fmt: skip
    return uvicorn.Config(app, http=protocol, **options)
