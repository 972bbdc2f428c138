"""How a loop's slots are shared between client requests rather than between sequences.

A request with ``n`` choices runs as ``n`` sequences. Taken first come, first served, they hold every slot
until their answers end, and a one-line chat that comes after them waits for all of them. Here the slots go
round the requests instead: the next sequence admitted is the oldest of the request with the fewest running,
and a request that has none running while another holds two slots more than it takes one of that request's
slots at once (the loop pauses a sequence there and resumes it later, see
:meth:`engine.backends.llamacpp.scheduler.DecodeLoop`). While several requests decode, each puts one row in a
step, its choices taking turns.

Pure functions over the loop's sequences, so they are tested without a model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar


class Grouped(Protocol):
    @property
    def group(self) -> str: ...


S = TypeVar("S", bound=Grouped)


def next_admitted(waiting: Sequence[S], running: Iterable[Grouped]) -> S:
    """The waiting sequence to admit next: the first in line of the request with the fewest sequences running."""
    counts = Counter(s.group for s in running)
    return min(enumerate(waiting), key=lambda item: (counts[item[1].group], item[0]))[1]


def preemption_victim(newcomer: Grouped, running: Sequence[S], *, pausable: Callable[[S], bool]) -> S | None:
    """A running sequence to pause so that ``newcomer`` gets its slot, or None where none should be.

    Only a request holding at least two slots more than ``newcomer``'s gives one up (so slots never pass back and
    forth between two requests), and of its ``pausable`` sequences the one admitted last.

    Args:
        newcomer: The sequence waiting for a slot.
        running: The sequences that hold the slots, in admission order.
        pausable: Whether a sequence can be paused now (the loop's own conditions).
    """
    counts = Counter(s.group for s in running)
    mine = counts[newcomer.group]
    best: S | None = None
    best_key: tuple[int, int] | None = None
    for i, s in enumerate(running):
        if counts[s.group] < mine + 2 or not pausable(s):
            continue
        key = (-counts[s.group], -i)  # the request holding the most slots; its latest admitted sequence
        if best_key is None or key < best_key:
            best, best_key = s, key
    return best


def one_row_per_request(decoding: Sequence[S], last_step: Callable[[S], int]) -> list[S]:
    """The sequences of ``decoding`` that put a row in this step: all of them while one request decodes alone;
    while several do, one of each request's (its choices take turns, the one whose ``last_step`` is oldest first).

    On a CPU a step's cost grows with its rows, so a request whose four choices each put a row in every step
    made a chat beside it several times as slow as alone; in turns, the chat's steps cost about two rows.
    """
    chosen: dict[str, S] = {}
    for s in decoding:
        held = chosen.get(s.group)
        if held is None or last_step(s) < last_step(held):
            chosen[s.group] = s
    if len(chosen) <= 1:
        return list(decoding)
    picked = set(map(id, chosen.values()))
    return [s for s in decoding if id(s) in picked]


#: Steps after its arrival from which a prompt is read before shorter ones that came later.
MAX_WAIT_STEPS = 128


def prompt_order(step: int, arrived: int, left: int, wait_steps: int = MAX_WAIT_STEPS) -> tuple[int, int]:
    """Where a prompt goes among those to read at loop step ``step``: the one with the fewest tokens ``left`` first
    (a short question that comes while a long document is read gets its first token at once), except that one
    which ``arrived`` ``wait_steps`` steps ago or more goes first, by arrival, so no long prompt waits for ever."""
    return (0, arrived) if step - arrived >= wait_steps else (1, left)


__all__ = ["MAX_WAIT_STEPS", "next_admitted", "one_row_per_request", "preemption_victim", "prompt_order"]
