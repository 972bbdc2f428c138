"""ChatStream: one streamed chat completion, read as it arrives through ``readyRead``.

Deltas are batched per read (one signal per network read, not per token), so a fast model
costs the GUI thread one row update per read at most.
"""

from __future__ import annotations

import json
import logging

from pydantic import ValidationError
from PySide6.QtCore import QByteArray, QObject, Signal
from PySide6.QtNetwork import QNetworkAccessManager, QNetworkReply, QNetworkRequest

from app.net.client import STATUS, error_from_reply
from app.net.types import ApiError, StreamResult
from engine.server.api_models import ChatDocuments
from engine.sse import DONE, SseParser

log = logging.getLogger(__name__)

ENDPOINT = "POST /v1/chat/completions"


class ChatStream(QObject):
    """Emits ``delta`` with new text, then exactly one of ``finished`` or ``failed``."""

    delta = Signal(str)
    reasoning = Signal(str)  # the model's thinking (delta.reasoning_content), before its answer
    documents = Signal(object)  # engine.server.api_models.ChatDocuments: the passages the worker retrieved
    chunk = Signal(dict)  # every chunk as it came (the agent's turns assemble tool calls from them)
    finished = Signal(StreamResult)
    failed = Signal(ApiError)

    def __init__(self, nam: QNetworkAccessManager, request: QNetworkRequest, body: dict, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._nam = nam
        self._request = request
        self._body = json.dumps(body).encode()
        self._parser = SseParser()
        self._reply: QNetworkReply | None = None
        self._error_body = b""
        self._finish: str | None = None
        self._usage: dict = {}
        self._server_error: str | None = None
        self._saw_done = False
        self._ended = False
        self.content_events = 0  # one per token with the worker's streaming

    def start(self) -> None:
        self._reply = self._nam.post(self._request, QByteArray(self._body))
        self._reply.readyRead.connect(self._read)
        self._reply.finished.connect(self._done)

    @property
    def running(self) -> bool:
        return self._reply is not None and not self._ended

    def abort(self) -> None:
        """Stop now; what arrived so far stands and ``finished`` says ``cancelled``."""
        if self._ended or self._reply is None:
            return
        self._end()
        self._reply.abort()  # closing the connection cancels the generation in the worker
        self.finished.emit(StreamResult("cancelled", self._usage.get("completion_tokens")))

    def _status(self) -> int:
        return int(self._reply.attribute(STATUS) or 0)

    def _read(self) -> None:
        if self._ended:
            return
        data = bytes(self._reply.readAll().data())
        if self._status() != 200:
            self._error_body += data
            return
        text = []
        for payload in self._parser.feed(data):
            text.append(self._event(payload))
        joined = "".join(text)
        if joined:
            self.delta.emit(joined)

    def _event(self, payload: str) -> str:
        if payload == DONE:
            self._saw_done = True
            return ""
        try:
            event = json.loads(payload)
        except ValueError:
            log.warning("skipping an unreadable event: %.80s", payload)
            return ""
        if "error" in event:
            err = event["error"] or {}
            self._server_error = str(err.get("message") or "The engine failed while answering.")
            return ""
        if event.get("usage"):
            self._usage = event["usage"]
        extension = event.get("hearth")
        if isinstance(extension, dict) and "sources" in extension:
            try:
                self.documents.emit(ChatDocuments.model_validate(extension))
            except ValidationError as exc:
                log.warning("skipping the answer's sources, which this app cannot read: %s", exc)
        self.chunk.emit(event)
        out = []
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if thought:
                self.reasoning.emit(thought)
            content = delta.get("content")
            if content:
                out.append(content)
                self.content_events += 1
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return "".join(out)

    def _end(self) -> None:
        self._ended = True

    def _done(self) -> None:
        reply = self._reply
        reply.deleteLater()
        if self._ended:
            return
        self._read()
        self._end()
        status = self._status()
        if status and status != 200:
            self._error_body += bytes(reply.readAll().data())
            self.failed.emit(error_from_reply(reply, self._error_body, ENDPOINT))
        elif self._server_error is not None:
            self.failed.emit(ApiError(self._server_error, status=500, code="server_error", endpoint=ENDPOINT))
        elif reply.error() != QNetworkReply.NetworkError.NoError or not (self._saw_done or self._finish):
            self.failed.emit(
                ApiError("The engine stopped while answering; the answer is kept up to that point.", endpoint=ENDPOINT)
            )
        else:
            self.finished.emit(
                StreamResult(
                    self._finish or "stop",
                    completion_tokens=self._usage.get("completion_tokens"),
                    prompt_tokens=self._usage.get("prompt_tokens"),
                    accepted_draft_tokens=int((self._usage.get("completion_tokens_details") or {}).get("accepted_prediction_tokens") or 0),
                )
            )
