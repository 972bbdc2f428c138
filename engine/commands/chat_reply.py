"""What one streamed answer of `hearth chat` came to: its text, and whether Ctrl-C or an error cut it short."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer as the terminal showed it.

    Attributes:
        text: The answer's text (what stays in the conversation).
        stopped: Ctrl-C stopped it.
        failed: The model or the worker ended it with an error (said on stderr).
    """

    text: str
    stopped: bool = False
    failed: bool = False

    @property
    def exit_code(self) -> int:
        """A one-shot chat's exit status: 0 for a whole answer, 130 when Ctrl-C stopped it, 1 on an error."""
        return 130 if self.stopped else 1 if self.failed else 0


def thinking_out() -> TextIO:
    """Where `hearth chat` prints a model's thinking: before the answer at a terminal (dimmed), on stderr when the
    answer goes to a file or another program, which then get the answer alone (``--hidethinking`` prints none)."""
    return sys.stdout if sys.stdout.isatty() else sys.stderr


__all__ = ["Reply", "thinking_out"]
