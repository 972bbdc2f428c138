"""Chunks handed from a generation thread to their consumers: blocking readers, or an asyncio loop woken
once per step for every stream that gained chunks in it.

A loop that serves many streams produces one step's chunks for all of them at once. Waking the event loop
once per chunk (``call_soon_threadsafe`` per token per stream) costs a system call and a lock each, and a
thread per stream to wait on its queue costs a thread switch per token; with hundreds of streams both take
more of the interpreter than the answers themselves. Here the producer marks the streams that gained
chunks; at the end of its step (:func:`delivery_batch`) each event loop concerned is woken once, and it
takes every ready stream's chunks in one callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Iterator

from engine.types import GenerationChunk

__all__ = ["ChunkQueue", "LoopWaker", "delivery_batch", "waker_for"]

_local = threading.local()


@contextlib.contextmanager
def delivery_batch() -> Iterator[None]:
    """Wake each event loop at most once for the chunks put inside this block (on this thread): at its end."""
    outer = getattr(_local, "wakers", None)
    if outer is not None:  # nested: the outermost block wakes
        yield
        return
    wakers: set[LoopWaker] = set()
    _local.wakers = wakers
    try:
        yield
    finally:
        _local.wakers = None
        for waker in wakers:
            waker.wake()


class LoopWaker:
    """Runs callbacks on one event loop, from any thread, with one ``call_soon_threadsafe`` per batch of them.

    Args:
        loop: The event loop the callbacks run on.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._ready: dict[int, Callable[[], None]] = {}
        self._scheduled = False

    def ready(self, key: int, callback: Callable[[], None]) -> None:
        """Have ``callback`` run on the loop soon (once, however often it is marked before it runs)."""
        with self._lock:
            self._ready[key] = callback
            if self._scheduled:
                return
            self._scheduled = True
        wakers = getattr(_local, "wakers", None)
        if wakers is not None:
            wakers.add(self)
        else:
            self._schedule()

    def wake(self) -> None:
        """Schedule the marked callbacks now (the end of a :func:`delivery_batch`)."""
        self._schedule()

    def _schedule(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop is closed: no one is left to read
            pass

    def _run(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, {}
            self._scheduled = False
        for callback in ready.values():
            callback()


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = weakref.WeakKeyDictionary()


def waker_for(loop: asyncio.AbstractEventLoop) -> LoopWaker:
    """The one waker of ``loop`` (every stream it reads shares it, so a step wakes the loop once)."""
    waker = _wakers.get(loop)
    if waker is None:
        waker = _wakers[loop] = LoopWaker(loop)
    return waker


class ChunkQueue:
    """One request's chunks: read blocking (:meth:`get`), or taken on an event loop when :meth:`listen`'s
    waker says some are ready."""

    __slots__ = ("_q", "_listener", "__weakref__")

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[GenerationChunk] = queue.SimpleQueue()
        self._listener: tuple[LoopWaker, Callable[[], None]] | None = None

    def put(self, chunk: GenerationChunk) -> None:
        self._q.put(chunk)
        listener = self._listener
        if listener is not None:
            listener[0].ready(id(self), listener[1])

    def get(self) -> GenerationChunk:
        return self._q.get()

    def empty(self) -> bool:
        return self._q.empty()

    def take(self) -> list[GenerationChunk]:
        """Every chunk queued now, without waiting."""
        out = []
        q = self._q
        while True:
            try:
                out.append(q.get_nowait())
            except queue.Empty:
                return out

    def listen(self, waker: LoopWaker, callback: Callable[[], None]) -> None:
        """Run ``callback`` on ``waker``'s loop whenever chunks arrive (and once now, for those already here)."""
        self._listener = (waker, callback)
        waker.ready(id(self), callback)
