"""Other compute on a model's decode thread (embeddings, reranking), run between two decode steps.

llama.cpp runs on an OpenMP team per calling thread, and once a second thread has one the two oversubscribe
the cores and every later decode step waits on sleeping workers (a quarter slower, for the life of the
process). So every llama.cpp call on a model's weights runs on its decode loop's thread, queued here, and while
requests generate the calls get a share of the time the decode steps take.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

# While requests generate, other compute on the decode thread (embeddings, reranking) gets this share of the
# time the decode steps take: the calls wait while their time so far exceeds it. A chat beside a long
# embedding list then runs at about two thirds of its own speed instead of a tenth, and the list still moves.
CALL_SHARE = 0.5
# Seconds of decode time that may be owed to the calls at most (no bursts after a long answer).
CALL_CREDIT_MAX = 0.1


class CallQueue:
    """Calls waiting for the decode thread, and the time they may still take while requests generate.

    Args:
        cond: The loop's condition: calls are queued under it (:meth:`add`), and taken under it to run.
        share: The calls' share of the decode steps' time while requests generate.
        credit_max: Most seconds of decode time owed to the calls at once.
    """

    def __init__(
        self, cond: threading.Condition, *, share: float = CALL_SHARE, credit_max: float = CALL_CREDIT_MAX
    ) -> None:
        self._cond = cond
        self.share = share
        self.credit_max = credit_max
        self.credit = 0.0  # seconds the calls may still take while requests generate
        self._pending: list[tuple[Callable[[], Any], Future]] = []

    @property
    def pending(self) -> bool:
        """Whether calls are waiting."""
        return bool(self._pending)

    def add(self, fn: Callable[[], Any]) -> Future:
        """Queue ``fn`` (the caller holds the loop's condition and notifies it); its future gets what it returns."""
        future: Future = Future()
        self._pending.append((fn, future))
        return future

    def run(self, *, generating: bool) -> None:
        """Run the calls waiting, on the decode thread: at once while no request generates (``generating``),
        else while they are owed time."""
        if not self._pending or (generating and self.credit <= 0):
            return
        t0 = time.perf_counter()
        with self._cond:
            calls, self._pending = self._pending, []
        for fn, future in calls:
            try:
                future.set_result(fn())
            except BaseException as exc:  # the caller raises it
                future.set_exception(exc)
        self.credit = self.credit - (time.perf_counter() - t0) if generating else 0.0

    def earn(self, seconds: float) -> None:
        """A decode step took ``seconds``: the calls waiting are owed their share of it."""
        if self._pending:
            self.credit = min(self.credit + seconds * self.share, self.credit_max)

    def fail(self, error: Callable[[], BaseException]) -> None:
        """End every call waiting with an ``error()`` of its own (the model is being unloaded; under the loop's
        condition)."""
        for _, future in self._pending:
            future.set_exception(error())
        self._pending.clear()


__all__ = ["CALL_CREDIT_MAX", "CALL_SHARE", "CallQueue"]
