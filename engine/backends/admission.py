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

    Args:
        max_waiting: Most requests queued before new ones are refused with Overloaded.
    """

    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self._waiting: deque[S] = deque()
        self._by_id: dict[str, S] = {}
        self._cond = threading.Condition()
        self._stopping = False

    def _queued(self) -> int:
        """Requests waiting, held to ``max_waiting`` (under ``_cond``); a loop that keeps a queue of its own
        past ``_waiting`` counts that one too."""
        return len(self._waiting)

    def submit(self, seq: S) -> None:
        """Queue ``seq``.

        Raises:
            Overloaded: too many requests are already waiting, or the model is being unloaded.
        """
        with self._cond:
            if self._stopping:
                raise Overloaded("The model is being unloaded; retry the request.", retry_after=1.0)
            queued = self._queued()
            if queued >= self.max_waiting:
                raise Overloaded(
                    f"{queued} requests are already waiting for this model; retry in a moment.", retry_after=2.0
                )
            self._waiting.append(seq)
            self._by_id[seq.request_id] = seq
            self._cond.notify()

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
