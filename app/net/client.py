"""ApiClient: the worker's HTTP API over QNetworkAccessManager (asynchronous, GUI thread).

Each call returns an :class:`ApiCall` whose ``succeeded`` signal carries the parsed, typed
result and whose ``failed`` signal carries an :class:`ApiError` with a sentence to show.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from PySide6.QtCore import QByteArray, QObject, QTimer, QUrl, Signal
from PySide6.QtNetwork import QNetworkAccessManager, QNetworkReply, QNetworkRequest
from shiboken6 import isValid

from app.net.engine import EngineController
from app.net.types import ApiError

log = logging.getLogger(__name__)

STATUS = QNetworkRequest.Attribute.HttpStatusCodeAttribute


def error_from_reply(reply: QNetworkReply, body: bytes, endpoint: str) -> ApiError:
    """The :class:`ApiError` for a failed reply: the worker's own message where it sent one."""
    status = reply.attribute(STATUS) or 0
    if not status:
        return ApiError(
            f"Cannot reach the engine ({reply.errorString()}); it may be restarting — try again in a moment.",
            endpoint=endpoint,
        )
    message, code = "", None
    try:
        err = json.loads(body or b"{}").get("error") or {}
        message, code = str(err.get("message") or ""), err.get("code")
    except (ValueError, AttributeError):
        pass
    if status == 404 and code in (None, "not_found"):
        message = f"This engine does not offer {endpoint} yet (it answered 404); update Hearth to use this."
    elif status == 401 and code in (None, "invalid_api_key"):  # not a remote provider's refusal
        message = "The engine refused the app's key; restart Hearth."
    return ApiError(message or f"The engine answered {status} to {endpoint}.", status=status, code=code, endpoint=endpoint)


class ApiCall(QObject):
    """One request in flight."""

    succeeded = Signal(object)
    failed = Signal(ApiError)

    def __init__(self, endpoint: str, parse: Callable[[Any], Any], parent: QObject) -> None:
        super().__init__(parent)
        self.endpoint = endpoint
        self._parse = parse
        self.reply: QNetworkReply | None = None

    def attach(self, reply: QNetworkReply) -> None:
        self.reply = reply
        reply.finished.connect(self._finished)

    def cancel(self) -> None:
        """End the request with no answer to anyone (its window is closing)."""
        reply, self.reply = self.reply, None
        if reply is not None and isValid(reply):
            reply.finished.disconnect(self._finished)
            reply.abort()
            reply.deleteLater()
        if isValid(self):
            self.deleteLater()

    def fail_soon(self, error: ApiError) -> None:
        QTimer.singleShot(0, self, lambda: self._emit_failed(error))

    def _emit_failed(self, error: ApiError) -> None:
        if isValid(self):
            self.failed.emit(error)
            self.deleteLater()

    def _finished(self) -> None:
        reply = self.reply
        if reply is None or not isValid(self) or not isValid(reply):  # cancelled, or its owner went meanwhile
            return
        body = bytes(reply.readAll().data())
        reply.deleteLater()
        if reply.error() != QNetworkReply.NetworkError.NoError or (reply.attribute(STATUS) or 0) >= 400:
            self._emit_failed(error_from_reply(reply, body, self.endpoint))
            return
        try:
            ctype = reply.header(QNetworkRequest.KnownHeaders.ContentTypeHeader) or ""
            data = json.loads(body) if "json" in str(ctype) else body.decode("utf-8", errors="replace")
            result = self._parse(data)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unexpected answer from %s: %s", self.endpoint, exc)
            self._emit_failed(ApiError(f"The engine sent an answer to {self.endpoint} the app cannot read.", endpoint=self.endpoint))
            return
        if isValid(self):  # parsing ran Python that may have closed the owner
            self.succeeded.emit(result)
            self.deleteLater()


class ApiClient(QObject):
    """Sends requests to whichever worker the :class:`EngineController` runs now."""

    def __init__(self, engine: EngineController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self.nam = QNetworkAccessManager(self)
        self._calls: set[ApiCall] = set()  # in flight

    def cancel_all(self) -> None:
        """End every request in flight with no answer (the window that asked is closing)."""
        for call in list(self._calls):
            call.cancel()
        self._calls.clear()

    def request(self, path: str, *, streaming: bool = False, timeout_ms: int = 30_000) -> QNetworkRequest:
        req = QNetworkRequest(QUrl(self.engine.root_url + path))
        token = self.engine.token
        if token:
            req.setRawHeader(b"Authorization", f"Bearer {token}".encode())
        req.setHeader(QNetworkRequest.KnownHeaders.ContentTypeHeader, "application/json")
        req.setAttribute(QNetworkRequest.Attribute.Http2AllowedAttribute, False)
        req.setAttribute(QNetworkRequest.Attribute.CacheLoadControlAttribute, QNetworkRequest.CacheLoadControl.AlwaysNetwork)
        if streaming:
            req.setRawHeader(b"Accept", b"text/event-stream")
        else:
            req.setTransferTimeout(timeout_ms)
        return req

    def call(
        self, method: str, path: str, parse: Callable[[Any], Any] = lambda d: d, body: Any = None, *, timeout_ms: int = 30_000
    ) -> ApiCall:
        """Send ``method path`` (with a JSON ``body``); the result goes through ``parse``."""
        endpoint = f"{method} {path.split('?', 1)[0]}"
        call = ApiCall(endpoint, parse, self)
        self._calls.add(call)
        call.destroyed.connect(lambda _o=None, c=call: self._calls.discard(c))
        if not self.engine.root_url:
            call.fail_soon(ApiError("The engine is not running yet; wait until it is ready.", endpoint=endpoint))
            return call
        req = self.request(path, timeout_ms=timeout_ms)
        if method == "GET":
            reply = self.nam.get(req)
        elif method == "DELETE":
            reply = self.nam.deleteResource(req)
        elif method == "PUT":
            reply = self.nam.put(req, QByteArray(json.dumps(body or {}).encode()))
        else:
            reply = self.nam.post(req, QByteArray(json.dumps(body or {}).encode()))
        call.attach(reply)
        return call

    def get(self, path: str, parse: Callable[[Any], Any] = lambda d: d, **query: Any) -> ApiCall:
        query = {k: v for k, v in query.items() if v not in (None, "")}
        return self.call("GET", path + (f"?{urlencode(query)}" if query else ""), parse)

    def post(self, path: str, body: Any = None, parse: Callable[[Any], Any] = lambda d: d, **kw: Any) -> ApiCall:
        return self.call("POST", path, parse, body, **kw)

    def delete(self, path: str, parse: Callable[[Any], Any] = lambda d: d) -> ApiCall:
        return self.call("DELETE", path, parse)

    @staticmethod
    def quote(segment: str) -> str:
        return quote(segment, safe="")
