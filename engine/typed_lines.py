"""What a person types at a terminal conversation's ``> `` prompt, or what is piped in instead: one reader for
`hearth chat` and its MCP mode."""

from __future__ import annotations

import sys
from collections.abc import Iterator

#: What leaves a conversation typed at the prompt, as in ``ollama run``.
LEAVE = frozenset({"/bye", "/exit", "/quit"})
HELP = "/bye leaves (also /exit, /quit, Ctrl-D); Ctrl-C stops an answer; /? or /help shows this."


def typed_lines(greeting: str) -> Iterator[str]:
    """The lines a person types at ``> `` after ``greeting`` (on stderr), blank ones left out: Ctrl-C at the prompt
    starts a new line, Ctrl-D or ``/bye`` ends, ``/help`` says so. (Ctrl-C during an answer is the caller's: it stops
    that answer.)"""
    print(f"{greeting} Ctrl-C stops an answer, /bye or Ctrl-D leaves.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        word = line.strip().lower()
        if word in LEAVE:
            return
        if word in ("/?", "/help"):
            print(HELP, file=sys.stderr)
            continue
        if line.strip():
            yield line


def piped_message() -> str | None:
    """Standard input read whole, as one message, where it is not a terminal (``echo hi | hearth chat``,
    ``hearth chat < notes.txt``, as ``ollama run`` takes it); None at a terminal, where the conversation is typed.
    An empty one is ``""``."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    return sys.stdin.read().strip()


__all__ = ["piped_message", "typed_lines"]
