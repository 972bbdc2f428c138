"""Bridges backend streams into asyncio, several choices at once.

A backend's own streams (:class:`~engine.backends.runtime.StreamChunks`) wake the event loop once per
step of their generation loop, for every stream that gained chunks in it: no thread waits on them. Any
other iterator (a remote provider's) is drained by a thread of its own. If the consumer goes away (client
disconnect, server shutdown) every generation is cancelled, which frees its slot within one token.

A stream whose reader fell behind (hundreds of streams on a busy machine) has several tokens waiting when
it is woken: they are handed over as one chunk (:func:`coalesce`), so the client gets one event for them
and the server builds and writes one. A reader that keeps up gets one chunk a token, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from engine.backends.delivery import waker_for
from engine.backends.runtime import StreamChunks
from engine.errors import HearthError
from engine.types import GenerationChunk, GenerationRequest


class Streamer(Protocol):
    """What serves the streams: a backend, or a model being served (engine.server.targets.Served)."""

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]: ...

    def cancel(self, request_id: str) -> None: ...


_END = object()


def _plain(chunk: GenerationChunk) -> bool:
    return chunk.finish_reason is None and not chunk.tool_call_deltas and not chunk.tool_calls and chunk.error is None


def coalesce(chunks: list[GenerationChunk]) -> list[GenerationChunk]:
    """``chunks`` of one stream with each run of plain pieces (text or thinking, not both, with their tokens
    and log-probabilities) joined into one chunk; tool-call pieces and the final chunk stay as they are."""
    if len(chunks) < 2:
        return chunks
    out: list[GenerationChunk] = []
    for chunk in chunks:
        last = out[-1] if out else None
        if (
            last is not None
            and _plain(last)
            and _plain(chunk)
            and not (last.reasoning and chunk.text)  # thinking, then text: two pieces, in order
            and not (last.text and chunk.reasoning)
        ):
            out[-1] = replace(last, text=last.text + chunk.text, reasoning=last.reasoning + chunk.reasoning,
                              token_ids=last.token_ids + chunk.token_ids, logprobs=last.logprobs + chunk.logprobs)  # fmt: skip
        else:
            out.append(chunk)
    return out


#: Seconds a stream waits for its first token before it sends a keep-alive (and then every as many): a long prompt
#: read on a CPU takes minutes, and proxies and clients' byte watchdogs give up on a silent connection (nginx: 60 s).
KEEPALIVE_SECONDS = 15.0

#: A server-sent events comment: every SSE reader skips it, and the connection is seen to be alive.
KEEPALIVE = b": keep-alive\n\n"

_T = TypeVar("_T")


async def ticks(items: AsyncIterator[_T], seconds: float = KEEPALIVE_SECONDS) -> AsyncGenerator[_T | None]:
    """``items``, with None every ``seconds`` until the first comes (the stream's keep-alives while its prompt is
    read); from the first on, the items as they come, with nothing between (no task per item)."""
    it = aiter(items)
    try:
        first = asyncio.ensure_future(anext(it))
        try:
            while not (await asyncio.wait({first}, timeout=seconds))[0]:
                yield None
        finally:
            if not first.done():  # the client went away while the prompt was read
                first.cancel()
                with contextlib.suppress(BaseException):
                    await first
        try:
            item = first.result()
        except StopAsyncIteration:
            return
        yield item
        async for item in it:
            yield item
    finally:  # closed early: ``items`` is closed now, not whenever it is collected
        if (close := getattr(it, "aclose", None)) is not None:
            with contextlib.suppress(Exception):
                await close()


async def open_streams(backend: Streamer, requests: Sequence[GenerationRequest]) -> list[Iterator[GenerationChunk]]:
    """Start every request (validation errors such as ContextLengthExceeded raise here,
    before any response is sent)."""
    started: list[Iterator[GenerationChunk]] = []
    try:
        for req in requests:
            started.append(await _opened(backend, req))
    except BaseException:
        for req, it in zip(requests, started, strict=False):
            backend.cancel(req.request_id)
            close_quietly(it)
        raise
    return started


async def _opened(backend: Streamer, req: GenerationRequest) -> Iterator[GenerationChunk]:
    """``backend.stream(req)``, called in a thread. Cancelled meanwhile (its client went, or its background response
    was cancelled), the thread still opens the stream: it is closed and its request cancelled once it is open, so no
    sequence goes on generating for nobody."""
    opening = asyncio.ensure_future(asyncio.to_thread(backend.stream, req))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:

        def undo(done: asyncio.Future[Iterator[GenerationChunk]]) -> None:
            if not done.cancelled() and done.exception() is None:
                backend.cancel(req.request_id)
                close_quietly(done.result())

        opening.add_done_callback(undo)
        raise


def close_quietly(it: Iterator[GenerationChunk]) -> None:
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
    interval: float = 0.0,
) -> AsyncIterator[tuple[int, GenerationChunk]]:
    """Yield ``(choice index, chunk)`` as chunks arrive from every stream, until all have finished; a stream's
    chunks are taken at most every ``interval`` seconds, several as one, but for its first text and its end
    (engine.backends.delivery).

    A stream that raises ends with an error chunk; the exception itself goes into ``failures``
    under its choice index, so the server can answer with the status its type calls for.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def fail(index: int, exc: BaseException) -> GenerationChunk:
        if failures is not None:
            failures[index] = exc
        message = str(exc) if isinstance(exc, HearthError) else f"Generation failed: {exc}."
        return GenerationChunk(finish_reason="error", error=message)

    def post(item: tuple[int, Any]) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop has closed (the server stopped): nobody reads the rest
            return False
        return True

    def pump(index: int, it: Iterator[GenerationChunk]) -> None:
        try:
            for chunk in it:
                if not post((index, chunk)):
                    close_quietly(it)
                    return
        except BaseException as exc:  # surfaced to the consumer as an error chunk
            post((index, fail(index, exc)))
        post((index, _END))

    def ready(index: int, it: StreamChunks) -> None:  # on the loop, when the stream gained chunks
        if it.done:
            return
        try:
            chunks = it.take()
        except BaseException as exc:
            it.done = True
            queue.put_nowait((index, fail(index, exc)))
            queue.put_nowait((index, _END))
            return
        for chunk in coalesce(chunks):
            queue.put_nowait((index, chunk))
        if it.done:
            queue.put_nowait((index, _END))

    waker = waker_for(loop)
    waker.interval = interval  # the server's own: the same for every request it serves on this loop
    threads = []
    for i, (req, it) in enumerate(zip(requests, streams, strict=True)):
        if isinstance(it, StreamChunks):
            it.listen(waker, lambda i=i, it=it: ready(i, it))
        else:
            t = threading.Thread(target=pump, args=(i, it), name=f"stream-{req.request_id[:8]}", daemon=True)
            threads.append(t)
            t.start()
    remaining = len(streams)
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
