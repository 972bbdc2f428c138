"""The queue in front of a backend's generation thread: first come, first served, bounded."""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, Protocol, TypeVar

from engine.errors import Overloaded


class Queued(Protocol):
    """What the queue needs of a request's sequence: its id, and a flag the loop reads to stop it."""

    cancelled: bool

    @property
    def request_id(self) -> str: ...


S = TypeVar("S", bound=Queued)


class AdmissionQueue(Generic[S]):
    """Requests waiting for a generation loop, and cancellation by request id.

    Subclasses run the loop: they take from ``_waiting`` under ``_cond``, and drop a
    finished request from ``_by_id``.

    A request the loop can run at once (one of ``max_running``) is never refused: only those past the slots count
    as waiting, so a burst of as many requests as the loop runs together is always taken.

    Args:
        max_waiting: Most requests waiting beyond the slots before new ones are refused with Overloaded.
        max_running: Requests the loop runs at once.
    """

    def __init__(self, max_waiting: int, *, max_running: int = 0) -> None:
        self.max_waiting = max_waiting
        self.max_running = max_running
        self._waiting: deque[S] = deque()
        self._by_id: dict[str, S] = {}
        self._cond = threading.Condition()
        self._stopping = False

    def _queued(self) -> int:
        """Requests waiting beyond the slots, held to ``max_waiting`` (under ``_cond``): every request taken
        and not finished (``_by_id``) less those the loop runs at once (negative: slots are free)."""
        return len(self._by_id) - self.max_running

    def submit(self, seq: S) -> None:
        """Queue ``seq``.

        Raises:
            Overloaded: too many requests are already waiting, or the model is being unloaded.
        """
        with self._cond:
            self._accept(seq)
            self._waiting.append(seq)
            self._cond.notify()

    def _accept(self, seq: S) -> None:
        """Take ``seq`` (under ``_cond``): counted and found by its id from now on.

        Raises:
            Overloaded: too many requests are already waiting, or the model is being unloaded.
        """
        if self._stopping:
            raise Overloaded("The model is being unloaded; retry the request.", retry_after=1.0)
        queued = self._queued()
        if queued >= self.max_waiting:
            if self.max_waiting == 0:
                why = f"All {self.max_running} of this model's slots are taken and it keeps no queue"
            else:
                why = "1 request is already waiting for this model" if queued == 1 else f"{queued} requests are already waiting for this model"
            raise Overloaded(f"{why}; retry in a moment.", retry_after=2.0)
        self._by_id[seq.request_id] = seq

    def cancel(self, request_id: str) -> None:
        """Stop ``request_id`` at the loop's next step; unknown ids are ignored."""
        with self._cond:
            seq = self._by_id.get(request_id)
            if seq is not None:
                seq.cancelled = True
                self._cond.notify()

    def cancel_all(self) -> None:
        """Stop every request (at shutdown); each stream still ends with its final chunk."""
        with self._cond:
            for seq in self._by_id.values():
                seq.cancelled = True
            self._cond.notify()
