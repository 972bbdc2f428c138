"""The queue in front of a backend's generation thread: first come, first served, bounded."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from engine.errors import Overloaded


class AdmissionQueue:
    """Requests waiting for a generation loop, and cancellation by request id.

    Subclasses run the loop: they take from ``_waiting`` under ``_cond``, and drop a
    finished request from ``_by_id``.

    Args:
        max_waiting: Most requests queued before new ones are refused with Overloaded.
    """

    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self._waiting: deque[Any] = deque()
        self._by_id: dict[str, Any] = {}
        self._cond = threading.Condition()
        self._stopping = False

    def submit(self, seq: Any) -> None:
        """Queue ``seq`` (anything with ``request_id`` and ``cancelled``).

        Raises:
            Overloaded: too many requests are already waiting, or the model is being unloaded.
        """
        with self._cond:
            if self._stopping:
                raise Overloaded("The model is being unloaded; retry the request.", retry_after=1.0)
            if len(self._waiting) >= self.max_waiting:
                raise Overloaded(
                    f"{len(self._waiting)} requests are already waiting for this model; retry in a moment.",
                    retry_after=2.0,
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
