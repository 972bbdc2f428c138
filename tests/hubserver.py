"""A local stand-in for the model hub: the few endpoints Hearth's catalog uses, for the real
``huggingface_hub`` client (point HF_ENDPOINT or ``endpoint=`` at :attr:`FakeHub.url`).

Speaks:
  GET  /api/models?search=&sort=&direction=&filter=&limit=     model search
  GET  /api/models/{repo}[/revision/{rev}][?blobs=true]           repo info, files with LFS size/sha256
  HEAD/GET /{repo}/resolve/{rev}/{path}                           files: ETag, X-Repo-Commit, Range

and can misbehave on purpose: drop a connection part-way through a file, corrupt a payload, serve
slowly, stall, rate-limit, demand a token (gated and private repos). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class HubFile:
    """A file of a fake repo. ``listed_size`` makes the listing report a size other than the payload's."""

    path: str
    data: bytes
    lfs: bool = True
    listed_size: int | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def git_sha1(self) -> str:
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()

    @property
    def size(self) -> int:
        return self.listed_size if self.listed_size is not None else len(self.data)


@dataclass
class HubRepo:
    id: str
    files: list[HubFile]
    tags: list[str] = field(default_factory=list)
    library_name: str | None = None
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2025-01-01T00:00:00.000Z"
    gated: bool | str = False
    private: bool = False
    gguf: dict | None = None

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.id.encode()).hexdigest()

    def file(self, path: str) -> HubFile | None:
        return next((f for f in self.files if f.path == path), None)


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


class FakeHub:
    """The server. Use as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(self, repos: list[HubRepo], *, token: str = "hf_test_token", chunk: int = 64 * 1024) -> None:
        self.repos = {r.id: r for r in repos}
        self.token = token
        self.chunk = chunk
        self.requests: list[Recorded] = []
        self.drop_after: dict[str, int] = {}  # file path -> bytes sent before the connection drops (once)
        self.corrupt: set[str] = set()  # file paths served with a flipped byte
        self.throttle: dict[str, float] = {}  # file path -> seconds to wait before each chunk
        self.rate_limited = False
        self.stall = 0.0  # seconds to sit on every request before answering
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ------------------------------------------------------------------------------
    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the fake hub is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
        self.drop_after.clear()
        self.corrupt.clear()
        self.throttle.clear()
        self.rate_limited = False
        self.stall = 0.0

    def record(self, item: Recorded) -> None:
        with self._lock:
            self.requests.append(item)

    def file_requests(self, path: str, method: str = "GET") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.method == method and "/resolve/" in r.path and r.path.endswith("/" + path)]

    def ranges(self, path: str) -> list[str | None]:
        """The Range header of every GET of ``path`` (None where there was none)."""
        return [r.headers.get("range") for r in self.file_requests(path)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients hang up on purpose (pause, cancel)
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    # -- plumbing -----------------------------------------------------------------------------
    def _send_json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send_json(status, {"error": message}, headers)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization", "") == f"Bearer {self.fake.token}"

    def _repo(self, repo_id: str):
        repo = self.fake.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.private and not self._authorized():
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        return repo

    # -- routes -------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        self.fake.record(Recorded(self.command, path, query, {k.lower(): v for k, v in self.headers.items()}))
        if self.fake.stall:
            time.sleep(self.fake.stall)
        if self.fake.rate_limited:
            self._error(429, None, "Too many requests")
            return
        try:
            if path == "/api/models":
                self._search(query)
            elif path.startswith("/api/models/"):
                self._info(path.removeprefix("/api/models/"), query)
            elif "/resolve/" in path:
                self._resolve(path.lstrip("/"))
            else:
                self._error(404, None, "Not found")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _search(self, query: dict[str, list[str]]) -> None:
        text = query.get("search", [""])[0].lower()
        filters = query.get("filter", [])
        repos = [
            r
            for r in self.fake.repos.values()
            if text in r.id.lower()
            and (not r.private or self._authorized())
            and all(f in r.tags or f == r.library_name for f in filters)
        ]
        key = {"downloads": "downloads", "likes": "likes", "lastModified": "last_modified"}.get(query.get("sort", [""])[0])
        if key:
            repos.sort(key=lambda r: getattr(r, key), reverse=True)
        limit = int(query.get("limit", ["1000"])[0])
        self._send_json(200, [self._summary(r, siblings_detail=False) for r in repos[:limit]])

    def _summary(self, r: HubRepo, *, siblings_detail: bool) -> dict:
        siblings = []
        for f in r.files:
            s: dict = {"rfilename": f.path}
            if siblings_detail:
                s.update(size=f.size, blobId=f.git_sha1)
                if f.lfs:
                    s["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": 134}
            siblings.append(s)
        out = {
            "_id": r.sha[:24],
            "id": r.id,
            "modelId": r.id,
            "author": r.id.split("/")[0],
            "sha": r.sha,
            "private": r.private,
            "gated": r.gated,
            "disabled": False,
            "downloads": r.downloads,
            "likes": r.likes,
            "lastModified": r.last_modified,
            "createdAt": "2024-01-01T00:00:00.000Z",
            "tags": r.tags,
            "library_name": r.library_name,
            "siblings": siblings,
        }
        if r.gguf:
            out["gguf"] = r.gguf
        return out

    def _info(self, rest: str, query: dict[str, list[str]]) -> None:
        owner, _, tail = rest.partition("/")
        name, _, revision_part = tail.partition("/")
        repo = self._repo(f"{owner}/{name}")
        if repo is None:
            return
        if revision_part:
            rev = revision_part.removeprefix("revision/")
            if rev not in ("main", repo.sha):
                self._error(404, "RevisionNotFound", "Invalid rev id")
                return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        self._send_json(200, self._summary(repo, siblings_detail=blobs))

    def _resolve(self, path: str) -> None:
        owner, name, _, rev, *rest = path.split("/")
        repo = self._repo(f"{owner}/{name}")
        if repo is None:
            return
        if repo.gated and not self._authorized():
            self._error(401, "GatedRepo", f"Access to model {repo.id} is restricted.")
            return
        if rev not in ("main", repo.sha):
            self._error(404, "RevisionNotFound", "Invalid rev id")
            return
        file = repo.file("/".join(rest))
        if file is None:
            self._error(404, "EntryNotFound", "Entry not found")
            return
        data = file.data
        if file.path in self.fake.corrupt:
            middle = len(data) // 2
            data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
        total = len(data)
        start, end = 0, total - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start = int(a)
            end = min(int(b), total - 1) if b else total - 1
            if start >= total:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{total}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{file.sha256 if file.lfs else file.git_sha1}"')
        self.send_header("X-Repo-Commit", repo.sha)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.end_headers()
        if self.command == "HEAD":
            return
        body = memoryview(data)[start : end + 1]
        drop = self.fake.drop_after.pop(file.path, None)
        delay = self.fake.throttle.get(file.path, 0.0)
        sent = 0
        for i in range(0, len(body), self.fake.chunk):
            piece = body[i : i + self.fake.chunk]
            if drop is not None and sent + len(piece) > drop:
                self.wfile.write(piece[: max(0, drop - sent)])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if delay:
                time.sleep(delay)
            self.wfile.write(piece)
            sent += len(piece)
