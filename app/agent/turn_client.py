"""QtTurnClient: the agent loop's model turns through the app's one HTTP client.

The agent loop runs on its own thread with asyncio (engine.agent.runtime); the app's requests go
through Qt's network stack on the GUI thread. A turn is handed to the GUI thread by a queued signal,
streamed there by :class:`app.net.chat_stream.ChatStream`, assembled with the engine's
:class:`TurnAssembler`, and its end is handed back to the loop's thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.net.api import HearthApi
from app.net.chat_stream import ChatStream
from app.net.types import StreamResult
from engine.agent import ModelTurn, ModelTurnError, TurnAssembler, turn_body


@dataclass
class _Turn:
    """One turn in flight: what the GUI thread needs, and where the loop waits."""

    body: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    assembler: TurnAssembler
    stream: ChatStream | None = None
    aborted: bool = False
    error: list[str] = field(default_factory=list)


class QtTurnClient(QObject):
    """Lives on the GUI thread; :meth:`turn` is awaited on the agent's thread."""

    _begin = Signal(object)  # _Turn, queued to the GUI thread
    _abort = Signal(object)

    def __init__(self, api: HearthApi, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.api = api
        self._begin.connect(self._start)
        self._abort.connect(self._stop)

    async def turn(
        self,
        body: dict[str, Any],
        *,
        on_content: Callable[[str], None] | None = None,
        on_reasoning: Callable[[str], None] | None = None,
    ) -> ModelTurn:
        """One streamed turn. Raises ModelTurnError with the API's message when it refuses."""
        loop = asyncio.get_running_loop()
        job = _Turn(turn_body(body), loop, loop.create_future(), TurnAssembler(on_content=on_content, on_reasoning=on_reasoning))
        self._begin.emit(job)
        try:
            return await job.future
        finally:
            if not job.future.done() or job.future.cancelled():
                self._abort.emit(job)  # the loop was stopped: the request ends too

    # -- on the GUI thread ------------------------------------------------------------------------
    def _start(self, job: _Turn) -> None:
        if job.aborted or job.future.done():
            return
        stream = self.api.stream_chat(job.body)
        job.stream = stream
        stream.chunk.connect(lambda chunk, j=job: self._chunk(j, chunk))
        stream.finished.connect(lambda result, j=job: self._finished(j, result))
        stream.failed.connect(lambda error, j=job: self._settle(j, exc=ModelTurnError(error.message)))

    def _chunk(self, job: _Turn, chunk: dict) -> None:
        try:
            job.assembler.feed(chunk)
        except ModelTurnError as exc:
            job.error.append(str(exc))

    def _finished(self, job: _Turn, result: StreamResult) -> None:
        if job.error:
            self._settle(job, exc=ModelTurnError(job.error[0]))
        elif result.finish_reason == "cancelled":
            self._settle(job, exc=asyncio.CancelledError())
        else:
            self._settle(job, turn=job.assembler.result())

    def _settle(self, job: _Turn, *, turn: ModelTurn | None = None, exc: BaseException | None = None) -> None:
        def settle() -> None:
            if job.future.done():
                return
            if isinstance(exc, asyncio.CancelledError):
                job.future.cancel()
            elif exc is not None:
                job.future.set_exception(exc)
            else:
                job.future.set_result(turn)

        if not job.loop.is_closed():
            job.loop.call_soon_threadsafe(settle)

    def _stop(self, job: _Turn) -> None:
        job.aborted = True
        if job.stream is not None:
            job.stream.abort()


__all__ = ["QtTurnClient"]
