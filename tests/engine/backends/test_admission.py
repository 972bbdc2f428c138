"""The queue in front of every backend's generation thread: bounded, cancellable by id, closed at unload."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from engine.backends.admission import AdmissionQueue
from engine.errors import Overloaded


@dataclass(eq=False)
class Item:
    request_id: str
    cancelled: bool = False


def test_a_full_queue_refuses_in_one_sentence_and_cancels_by_id():
    queue = AdmissionQueue[Item](max_waiting=2)
    a, b = Item("a"), Item("b")
    queue.submit(a)
    queue.submit(b)
    with pytest.raises(Overloaded) as err:
        queue.submit(Item("c"))
    assert str(err.value) == "2 requests are already waiting for this model; retry in a moment."
    assert err.value.retry_after == 2.0
    queue.cancel("b")
    queue.cancel("never-seen")  # ignored
    assert (a.cancelled, b.cancelled) == (False, True)
    queue.cancel_all()
    assert a.cancelled


def test_requests_within_the_slots_are_never_refused_and_only_those_beyond_them_wait():
    queue = AdmissionQueue[Item](max_waiting=0, max_running=3)
    for name in "abc":  # a burst of as many as run at once, before the loop has taken any
        queue.submit(Item(name))
    with pytest.raises(Overloaded, match="^All 3 of this model's slots are taken and it keeps no queue; retry"):
        queue.submit(Item("d"))
    queue = AdmissionQueue[Item](max_waiting=1, max_running=2)
    for name in "abc":
        queue.submit(Item(name))
    with pytest.raises(Overloaded, match="^1 request is already waiting"):
        queue.submit(Item("d"))
    with queue._cond:  # one ends: its place is free again
        queue._by_id.pop("a")
    queue.submit(Item("d"))


class EngineLike(AdmissionQueue[Item]):
    """A loop that moves requests into a scheduler of its own, where they still wait."""

    def __init__(self) -> None:
        super().__init__(max_waiting=2)
        self.scheduled: list[Item] = []

    def _queued(self) -> int:
        return len(self._waiting) + len(self.scheduled)

    def take(self) -> None:
        with self._cond:
            while self._waiting:
                self.scheduled.append(self._waiting.popleft())

    def close(self) -> None:
        with self._cond:
            self._stopping = True


def test_requests_waiting_in_the_loops_own_scheduler_count_toward_the_bound():
    loop = EngineLike()
    loop.submit(Item("a"))
    loop.take()
    loop.submit(Item("b"))
    with pytest.raises(Overloaded, match="^2 requests are already waiting"):
        loop.submit(Item("c"))
    loop.cancel("a")  # cancellation still finds a request the loop has taken
    assert loop.scheduled[0].cancelled


def test_a_model_being_unloaded_refuses_new_requests():
    loop = EngineLike()
    loop.close()
    with pytest.raises(Overloaded, match="being unloaded") as err:
        loop.submit(Item("a"))
    assert err.value.retry_after == 1.0
