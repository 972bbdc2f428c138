"""The live request log: one record per finished generation, fanned out to every ``GET /api/log/stream``.

A record is published where a generation ends (the same place the metrics count it), on the event loop.
Each subscriber has a bounded queue of its own: a reader that falls behind loses records (counted, and
told how many with the next one it gets), and never slows the worker or the other readers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import asdict, dataclass

# Records a subscriber may fall behind by before new ones are dropped for it.
SUBSCRIBER_QUEUE = 256

# The dialect of each generation route (what `hearth log stream` shows).
DIALECTS = {
    "/v1/chat/completions": "openai",
    "/v1/completions": "openai-completions",
    "/v1/responses": "openai-responses",
    "/v1/messages": "anthropic",
    "/api/chat": "ollama",
    "/api/generate": "ollama",
}


def dialect_of(path: str) -> str:
    """The API dialect a request for ``path`` speaks (``other`` for a route not listed)."""
    return DIALECTS.get(path, "other")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished generation request.

    Attributes:
        time: When it finished (seconds since the epoch).
        model: The model that answered.
        dialect: ``openai``, ``openai-completions``, ``openai-responses``, ``anthropic`` or ``ollama``.
        path: The route it came in by.
        status: ``ok``, ``error`` or ``cancelled``.
        prompt_tokens: Tokens of its prompt.
        completion_tokens: Tokens generated (every choice).
        ttft_ms: Milliseconds from its arrival to its first token; None when none came.
        tokens_per_second: Generated tokens per second after the first; None for fewer than two.
        duration_ms: Milliseconds from its arrival to its end.
        request_id: The id its response named in ``x-request-id`` (engine.server.response_headers).
    """

    time: float
    model: str
    dialect: str
    path: str
    status: str
    prompt_tokens: int
    completion_tokens: int
    ttft_ms: float | None
    tokens_per_second: float | None
    duration_ms: float
    request_id: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


class LogSubscriber:
    """One reader of the log: a bounded queue and the count of what did not fit in it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[RequestRecord] = asyncio.Queue(maxsize=size)
        self.dropped = 0  # records lost since the last one this reader got
        self.dropped_total = 0

    def offer(self, record: RequestRecord) -> bool:
        """Queue ``record``, or count it dropped when the queue is full (on the subscriber's loop)."""
        try:
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            self.dropped += 1
            self.dropped_total += 1
            return False
        return True

    async def next(self, timeout: float) -> tuple[RequestRecord, int] | None:
        """The next record and how many were dropped before it, or None after ``timeout`` seconds."""
        try:
            record = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        dropped, self.dropped = self.dropped, 0
        return record, dropped


class RequestLog:
    """Fans finished requests out to the subscribers of the live log (thread-safe)."""

    def __init__(self, queue_size: int = SUBSCRIBER_QUEUE) -> None:
        self.queue_size = queue_size
        self._subscribers: set[LogSubscriber] = set()
        self._lock = threading.Lock()
        self.published = 0
        self.dropped = 0  # records dropped for slow readers, all readers together

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def subscribe(self) -> LogSubscriber:
        """A new reader, fed from now on (call on the event loop; :meth:`unsubscribe` when done)."""
        sub = LogSubscriber(asyncio.get_running_loop(), self.queue_size)
        with self._lock:
            self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: LogSubscriber) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    def publish(self, record: RequestRecord) -> None:
        """Give ``record`` to every reader; never blocks (a full reader's copy is dropped and counted)."""
        with self._lock:
            subs = list(self._subscribers)
            self.published += 1
        for sub in subs:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is sub.loop:
                if not sub.offer(record):
                    self._count_drop()
            else:  # from another thread: the reader's own loop queues it
                sub.loop.call_soon_threadsafe(self._offer_later, sub, record)

    def _offer_later(self, sub: LogSubscriber, record: RequestRecord) -> None:
        if not sub.offer(record):
            self._count_drop()

    def _count_drop(self) -> None:
        with self._lock:
            self.dropped += 1


def finished_record(
    *, model: str, path: str, status: str, t0: float, first_token_at: float | None, prompt_tokens: int,
    completion_tokens: int, now: float | None = None, request_id: str = "",
) -> RequestRecord:
    """The record of a generation that arrived at ``t0`` and ends now (``time.perf_counter`` clock)."""
    end = time.perf_counter() if now is None else now
    rate = None
    if first_token_at is not None and completion_tokens > 1 and end > first_token_at:
        rate = round((completion_tokens - 1) / (end - first_token_at), 2)
    return RequestRecord(
        time=time.time(), model=model, dialect=dialect_of(path), path=path, status=status,
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        ttft_ms=None if first_token_at is None else round((first_token_at - t0) * 1000, 1),
        tokens_per_second=rate, duration_ms=round((end - t0) * 1000, 1), request_id=request_id,
    )  # fmt: skip


__all__ = ["DIALECTS", "LogSubscriber", "RequestLog", "RequestRecord", "dialect_of", "finished_record"]
