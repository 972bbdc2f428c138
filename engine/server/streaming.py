"""Bridges blocking backend streams into asyncio, several choices at once.

Each backend stream is drained by a thread that hands chunks to the event loop. If the
consumer goes away (client disconnect, server shutdown) every generation is cancelled,
which frees its slot within one token.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Protocol

from engine.errors import HearthError
from engine.types import GenerationChunk, GenerationRequest


class Streamer(Protocol):
    """What serves the streams: a backend, or a model being served (engine.server.targets.Served)."""

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]: ...

    def cancel(self, request_id: str) -> None: ...


_END = object()


async def open_streams(backend: Streamer, requests: Sequence[GenerationRequest]) -> list[Iterator[GenerationChunk]]:
    """Start every request (validation errors such as ContextLengthExceeded raise here,
    before any response is sent)."""
    started: list[Iterator[GenerationChunk]] = []
    try:
        for req in requests:
            started.append(await asyncio.to_thread(backend.stream, req))
    except BaseException:
        for req, it in zip(requests, started, strict=False):
            backend.cancel(req.request_id)
            _close_quietly(it)
        raise
    return started


def _close_quietly(it: Iterator[GenerationChunk]) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        try:
            close()
        except (RuntimeError, ValueError):  # closing a generator running in another thread
            pass


async def merge_streams(
    backend: Streamer,
    requests: Sequence[GenerationRequest],
    streams: Sequence[Iterator[GenerationChunk]],
    failures: dict[int, BaseException] | None = None,
) -> AsyncIterator[tuple[int, GenerationChunk]]:
    """Yield ``(choice index, chunk)`` as chunks arrive from every stream, until all have finished.

    A stream that raises ends with an error chunk; the exception itself goes into ``failures``
    under its choice index, so the server can answer with the status its type calls for.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def pump(index: int, it: Iterator[GenerationChunk]) -> None:
        try:
            for chunk in it:
                loop.call_soon_threadsafe(queue.put_nowait, (index, chunk))
        except BaseException as exc:  # surfaced to the consumer as an error chunk
            if failures is not None:
                failures[index] = exc
            message = str(exc) if isinstance(exc, HearthError) else f"Generation failed: {exc}."
            err = GenerationChunk(finish_reason="error", error=message)
            loop.call_soon_threadsafe(queue.put_nowait, (index, err))
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, (index, _END))

    threads = [
        threading.Thread(target=pump, args=(i, it), name=f"stream-{req.request_id[:8]}", daemon=True)
        for i, (req, it) in enumerate(zip(requests, streams, strict=True))
    ]
    for t in threads:
        t.start()
    remaining = len(threads)
    finished: set[int] = set()
    try:
        while remaining:
            index, item = await queue.get()
            if item is _END:
                remaining -= 1
                continue
            if index in finished:
                continue
            if item.finish_reason is not None:
                finished.add(index)
            yield index, item
    finally:
        if remaining:
            for i, req in enumerate(requests):
                if i not in finished:
                    backend.cancel(req.request_id)
