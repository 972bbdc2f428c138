"""Turns for the parses that take the most memory: one large HTML or Markdown file is parsed at a time.

Each collection indexes in a thread of its own, and the HTML and Markdown parsers keep an object for every tag
and token, up to 200 times the file's size: four 2 MiB pages parsed at once peaked at 1.5 GB here (four 4 MiB
ones would take about 3 GB). A large file waits for its turn, and while it waits a cancel or pause of its own run
still takes effect at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
Checkpoint = Callable[[], None]  # between pages and blocks: waits while paused, raises IndexCancelled once cancelled

# Past this size a markup file takes its turn (a 256 KiB page peaks near 50 MB); smaller ones are parsed at once.
LARGE_MARKUP_BYTES = 256 * 1024
_POLL_S = 0.1  # how often a waiting file checks its run's cancel and pause


class _PausedInTurn(Exception):
    """The run was paused during a turn: the turn is given up and the file read again after the pause."""


class ParseTurns:
    """Lets ``at_once`` large parses run at a time in the process.

    Args:
        threshold: Files of at most this many bytes parse without a turn.
        at_once: How many large parses may run together.
    """

    def __init__(self, threshold: int = LARGE_MARKUP_BYTES, *, at_once: int = 1) -> None:
        self.threshold = threshold
        self._slots = threading.Semaphore(at_once)

    def read(
        self, size: int, read: Callable[[Checkpoint], T], checkpoint: Checkpoint, paused: Callable[[], bool]
    ) -> T:
        """``read(checkpoint)`` for a file of ``size`` bytes, in its turn when it is large.

        A pause met during the turn gives the turn up (a paused run never holds another collection's large file
        back) and the file is read again from its start once the run resumes.

        Raises:
            IndexCancelled: ``checkpoint`` raised it, while the file waited or was read.
        """
        if size <= self.threshold:
            return read(checkpoint)
        while True:
            while not self._slots.acquire(timeout=_POLL_S):
                checkpoint()
            try:
                return read(lambda: self._check(checkpoint, paused))
            except _PausedInTurn:
                pass
            finally:
                self._slots.release()
            checkpoint()  # waits out the pause with the turn and the half-built parse let go

    @staticmethod
    def _check(checkpoint: Checkpoint, paused: Callable[[], bool]) -> None:
        if paused():
            raise _PausedInTurn()
        checkpoint()


# One for the process: memory is the process's, whichever collection's thread parses.
MARKUP_TURNS = ParseTurns()
