"""The worker's connections: a head too large (431) or too slow (408), a body that stops (408), and room
for new clients when the connections reach their cap, on a real uvicorn server with the bounded protocol."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time

import pytest
import uvicorn

from engine.server.guard import RequestGuard
from engine.settings import ServerSettings
from engine.worker.connections import connection_cap, protocol_with, server_config
from engine.worker.net import bind_socket

HEAD = 4096
SECONDS = 0.5
CAP = 8


async def _app(scope, receive, send):
    """``/stream``: ten chunks 0.15 s apart; anything else: its body's length."""
    if scope["path"] == "/stream":
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"20")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(10):
            await send({"type": "http.response.body", "body": b"%d\n" % i, "more_body": True})
            await asyncio.sleep(0.15)
        await send({"type": "http.response.body", "body": b""})
        return
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = json.dumps({"size": size}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


class _Server:
    def __init__(self) -> None:
        app = RequestGuard(_app, ServerSettings(host="127.0.0.1", port=0), body_seconds=SECONDS)
        protocol = protocol_with(max_head_bytes=HEAD, head_seconds=SECONDS, max_connections=CAP)
        self.sock = bind_socket("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(
            server_config(app, protocol=protocol, log_level="critical", timeout_keep_alive=60)
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)

    def connect(self) -> _Conn:
        return _Conn(self.port)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.stop()


def _request(path: str = "/", body: bytes = b"", headers: str = "") -> bytes:
    method = "POST" if body else "GET"
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}content-length: {len(body)}\r\n\r\n"
    ).encode() + body


class _Conn:
    """A client socket that reads whole responses, keeping what follows one for the next."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buffer = b""

    def __enter__(self) -> _Conn:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {self.buffer!r}")
        self.buffer += chunk

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """One response (which must carry its content-length): status, headers, body."""
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        n = int(headers["content-length"])
        while len(self.buffer) < n:
            self._more()
        body, self.buffer = self.buffer[:n], self.buffer[n:]
        return int(lines[0].split()[1]), headers, body

    def closed(self) -> bool:
        """Whether the server has closed this connection (waiting up to 2 s for it to)."""
        self.sock.settimeout(2)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def test_a_head_within_the_limit_is_served_and_a_body_is_not_counted_as_head(server):
    with server.connect() as s:
        s.sendall(_request(headers=f"x-fill: {'a' * (HEAD - 200)}\r\n"))
        assert s.response()[0] == 200
        # a body many times the head limit, sent with its head in one write, then a second request behind it
        s.sendall(_request(body=b"x" * (HEAD * 50)) + _request(body=b"y" * (HEAD * 20)))
        assert json.loads(s.response()[2]) == {"size": HEAD * 50}
        assert json.loads(s.response()[2]) == {"size": HEAD * 20}


@pytest.mark.parametrize("what", ["one long header", "many headers", "a long path"])
def test_a_head_past_the_limit_is_a_431_and_the_connection_closes(server, what):
    with server.connect() as s:
        if what == "one long header":
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nx-big: ")
            filler = [b"a" * 1024] * 64  # never ends its line: the head never completes
        elif what == "many headers":
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            filler = [b"x-%d: a\r\n" % i for i in range(5000)]
        else:
            s.sendall(b"GET /")
            filler = [b"a" * 1024] * 64
        try:
            for piece in filler:
                s.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed while we were still sending
        status, headers, body = s.response()
        assert status == 431 and headers["connection"] == "close"
        assert json.loads(body)["error"]["message"] == (
            "The request's headers are larger than 4 KiB; send fewer or shorter headers."
        )
        assert s.closed()


@pytest.mark.parametrize("split", [None, -2, -100, -1500])
def test_a_head_past_the_limit_is_a_431_also_where_its_last_chunk_ends_it(server, split):
    """Every byte of a head counts, those of the chunk that ends it too (its blank line may straddle two chunks):
    a head a little past the limit, sent in one write or with its end in a second, is refused unread."""
    whole = _request(body=b"x" * 100, headers=f"x-fill: {'a' * (HEAD + 500)}\r\n")
    with server.connect() as s:
        if split is None:
            s.sendall(whole)
        else:
            s.sendall(whole[: split - 100])
            time.sleep(0.05)  # two reads on the server's side
            s.sendall(whole[split - 100 :])
        assert s.response()[0] == 431 and s.closed()
    with server.connect() as s:  # the same head within the limit is served
        s.sendall(_request(body=b"x" * (HEAD * 4), headers=f"x-fill: {'a' * (HEAD - 300)}\r\n"))
        assert json.loads(s.response()[2]) == {"size": HEAD * 4}


def test_a_head_that_does_not_arrive_in_time_is_a_408_and_the_connection_closes(server):
    with server.connect() as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half a head, and then silence
        status, _, body = s.response()
        assert status == 408
        assert "did not arrive within 0.5 seconds" in json.loads(body)["error"]["message"]
        assert s.closed()


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(server):
    with server.connect() as s:
        s.sock.settimeout(20)
        assert s.sock.recv(1024) == b""  # closed at the head's deadline, with no 408 a client could misread


def test_a_body_that_stops_arriving_is_a_408_and_the_connection_closes(server):
    with server.connect() as s:
        s.sendall(
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\n"
            + b"x" * 10
        )
        status, headers, body = s.response()
        assert status == 408 and headers["connection"] == "close"
        assert json.loads(body)["error"]["message"] == (
            "The request body stopped arriving for 0.5 seconds; send the whole body at once."
        )
        assert s.closed()


def test_a_kept_alive_connection_and_a_long_response_outlast_the_heads_deadline(server):
    with server.connect() as s:
        s.sendall(_request())
        assert s.response()[0] == 200
        # idle between requests: uvicorn's keep-alive timeout governs there, not the head's deadline
        time.sleep(SECONDS * 2)
        s.sendall(_request("/stream", headers="connection: close\r\n"))
        status, _, body = s.response()  # ten chunks over 1.5 s, three times the head's deadline
        assert status == 200 and body.split() == [b"%d" % i for i in range(10)]


def test_past_the_cap_a_new_connection_closes_the_longest_idle_one(server):
    idle = [server.connect() for _ in range(CAP)]
    for s in idle:
        s.sendall(_request())
        assert s.response()[0] == 200  # each served, then kept alive, idle
    with server.connect() as s:  # one more than the cap
        s.sendall(_request())
        assert s.response()[0] == 200
    assert idle[0].closed()  # the longest idle made room
    idle[-1].sendall(_request())  # the newest idle one is still open
    assert idle[-1].response()[0] == 200
    for s in idle:
        s.close()


def test_past_the_cap_with_every_connection_serving_a_new_one_is_a_503(server):
    busy = [server.connect() for _ in range(CAP)]
    for s in busy:
        s.sendall(_request("/stream"))
    for s in busy:  # each has its response started
        assert b"200" in s.sock.recv(64)
    with server.connect() as s:
        status, _, body = s.response()
        assert status == 503
        assert "as many connections open as it can serve" in json.loads(body)["error"]["message"]
    for s in busy:
        s.close()


def test_past_the_cap_a_new_connection_closes_the_longest_trickling_body(server):
    """Bodies sent a byte at a time, each in time for the body's deadline, hold no more than the cap: past it a
    new client closes the one that has been sending longest (after the body's grace), and is served."""
    from engine.worker.connections import BODY_GRACE_SECONDS

    slow = [server.connect() for _ in range(CAP)]
    for s in slow:
        s.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: text/plain\r\ncontent-length: 1000\r\n\r\nx")
    stop = threading.Event()

    def trickle() -> None:  # a byte to each every 0.2 s: within the 0.5 s a body may pause
        while not stop.wait(0.2):
            for s in slow:
                try:
                    s.sendall(b"x")
                except OSError:
                    pass

    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    try:
        time.sleep(BODY_GRACE_SECONDS + 0.3)
        with server.connect() as s:
            s.sendall(_request())
            assert s.response()[0] == 200
        assert slow[0].closed()  # the one that had been sending longest made room
        with server.connect() as s:  # and again, for the next client
            s.sendall(_request())
            assert s.response()[0] == 200
    finally:
        stop.set()
        feeder.join(5)
        for s in slow:
            s.close()


def test_the_cap_leaves_room_for_the_workers_own_files():
    assert connection_cap(1024) == 768
    assert connection_cap(256) == 192
    assert connection_cap(65536) == 4096
    assert connection_cap(10) == 16


@pytest.mark.skipif(sys.platform == "win32", reason="no limit on open files to raise")
def test_the_worker_raises_its_soft_limit_on_open_files_to_the_hard_one():
    code = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from engine.worker.connections import raise_open_file_limit\n"
        "want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)\n"
        "print(raise_open_file_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0] == want)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def _somaxconn() -> int:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except OSError:
        return 0


@pytest.mark.skipif(_somaxconn() < 300, reason="needs Linux with net.core.somaxconn of at least 300")
def test_a_burst_of_300_connections_waits_in_the_backlog_while_the_worker_is_busy():
    """The kernel completes each connection's handshake into the listening socket's backlog before the worker
    accepts it: with a backlog of 128, the 130th client of a burst had its SYN dropped and waited a second or more."""
    with bind_socket("127.0.0.1", 0) as listener:  # never accepts: an event loop busy elsewhere
        port = listener.getsockname()[1]
        clients = []
        try:
            for _ in range(300):
                clients.append(socket.create_connection(("127.0.0.1", port), timeout=3))
        finally:
            for c in clients:
                c.close()
        assert len(clients) == 300
