"""Chunks handed from a generation thread to their consumers: blocking readers, or an asyncio loop woken
once per step for every stream that gained chunks in it.

A loop that serves many streams produces one step's chunks for all of them at once. Waking the event loop
once per chunk (``call_soon_threadsafe`` per token per stream) costs a system call and a lock each, and a
thread per stream to wait on its queue costs a thread switch per token; with hundreds of streams both take
more of the interpreter than the answers themselves. Here the producer marks the streams that gained
chunks; at the end of its step (:func:`delivery_batch`) each event loop concerned is woken once, and it
takes every ready stream's chunks in one callback.

A loop can also take its streams' chunks at an interval (``hearth serve --stream-interval``), as vLLM's and
SGLang's ``--stream-interval`` do: a chunk's formatting and socket write cost the server's CPU per event, not per
token, so with many streams an answer's tokens of several steps go out as one event. Each stream's chunks up to
its first text, and its last, go at once: the first words and the end of an answer are never held back.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Iterator

from engine.errors import InvalidRequest
from engine.types import GenerationChunk

__all__ = ["ChunkQueue", "LoopWaker", "delivery_batch", "parse_interval", "waker_for"]

_local = threading.local()

#: The longest interval between a loop's takes (milliseconds).
MAX_INTERVAL_MS = 1000


def parse_interval(text: str) -> float:
    """Milliseconds from 0 to :data:`MAX_INTERVAL_MS` (``25`` or ``25ms``; 0: every step).

    Raises:
        InvalidRequest: anything else, in a sentence that says what to give.
    """
    try:
        ms = float(text.strip().lower().removesuffix("ms"))
    except ValueError:
        ms = -1.0
    if not 0 <= ms <= MAX_INTERVAL_MS:  # also NaN
        raise InvalidRequest(
            f"Give the stream interval in milliseconds from 0 to {MAX_INTERVAL_MS} (0: every token as it comes).",
            param="stream_interval",
        )
    return ms


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
    """Runs callbacks on one event loop, from any thread, with one ``call_soon_threadsafe`` per batch of them,
    at most once every :attr:`interval` seconds (but for the urgent ones).

    Args:
        loop: The event loop the callbacks run on.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.interval = 0.0  # seconds
        self._lock = threading.Lock()
        self._ready: dict[int, Callable[[], None]] = {}
        self._urgent: dict[int, Callable[[], None]] = {}  # first and last chunks: never held to the interval
        self._woken = False  # a call of _due is on its way to the loop
        self._held = False  # a timer on the loop takes the others when the interval has passed
        self._last = float("-inf")  # the loop's time of the last take of every stream

    def ready(self, key: int, callback: Callable[[], None], *, urgent: bool = False) -> None:
        """Have ``callback`` run on the loop soon (once, however often it is marked before it runs); ``urgent``:
        at once, not held to the interval."""
        with self._lock:
            (self._urgent if urgent else self._ready)[key] = callback
            if self._woken or (self._held and not urgent):  # the loop will come for it
                return
            self._woken = True
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
            self.loop.call_soon_threadsafe(self._due)
        except RuntimeError:  # the loop is closed: no one is left to read
            pass

    def _due(self) -> None:
        """On the loop: the urgent callbacks, and every other one if the interval has passed (else a timer for them)."""
        arm = 0.0
        ready: dict[int, Callable[[], None]] = {}
        with self._lock:
            self._woken = False
            urgent, self._urgent = self._urgent, {}
            for key in urgent:
                self._ready.pop(key, None)
            if self._ready and not self._held:  # (else the timer takes them)
                wait = self._last + self.interval - self.loop.time()
                if wait > 0:
                    self._held = True
                    arm = wait
                else:
                    ready, self._ready = self._ready, {}
        if ready:
            self._last = self.loop.time()
        if arm:
            self.loop.call_later(arm, self._take_held)
        self._run(urgent, ready)

    def _take_held(self) -> None:
        with self._lock:
            self._held = False
            ready, self._ready, urgent, self._urgent = self._ready, {}, self._urgent, {}
            for key in urgent:
                ready.pop(key, None)
        if ready:  # (those held may all have gone as urgent since)
            self._last = self.loop.time()
        self._run(urgent, ready)

    def _run(self, *batches: dict[int, Callable[[], None]]) -> None:
        for batch in batches:
            for callback in batch.values():
                try:
                    callback()
                except Exception as exc:  # one reader's fault: the others in the batch are still taken
                    self.loop.call_exception_handler({"message": "a stream's reader failed", "exception": exc})


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

    __slots__ = ("_q", "_listener", "_started", "__weakref__")

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[GenerationChunk] = queue.SimpleQueue()
        self._listener: tuple[LoopWaker, Callable[[], None]] | None = None
        self._started = False

    def put(self, chunk: GenerationChunk) -> None:
        self._q.put(chunk)
        # never held to the reader's interval: chunks up to the first with text (the first token may be half a
        # character, or the start of a stop string, and show nothing), and the last (the end of an answer)
        urgent = not self._started or chunk.finish_reason is not None or chunk.error is not None
        if chunk.text:
            self._started = True
        listener = self._listener
        if listener is not None:
            listener[0].ready(id(self), listener[1], urgent=urgent)

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
        waker.ready(id(self), callback, urgent=True)
