"""What a person types at a terminal conversation's ``> `` prompt, or what is piped in instead: one reader for
`hearth chat` and its MCP mode."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

#: What leaves a conversation typed at the prompt, as in ``ollama run``.
LEAVE = frozenset({"/bye", "/exit", "/quit"})
HELP = ("/clear starts the conversation over; /bye leaves (also /exit, /quit, Ctrl-D); Ctrl-C stops an answer; "
        "/? or /help shows this.")


def typed_lines(greeting: str, clear: Callable[[], None] | None = None) -> Iterator[str]:
    """The lines a person types at ``> `` after ``greeting`` (on stderr), blank ones left out: Ctrl-C at the prompt
    starts a new line, Ctrl-D or ``/bye`` ends, ``/clear`` calls ``clear`` (the caller forgets the conversation so
    far, as ``ollama run``'s ``/clear``), ``/help`` says so; another ``/word`` is named as unknown, not sent. (Ctrl-C
    during an answer is the caller's: it stops that answer.)"""
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
        if word == "/clear" and clear is not None:
            clear()
            print("The conversation starts over.", file=sys.stderr)
            continue
        if line.startswith("/") and len(word.split()) == 1 and word[1:].isalpha():
            print(f"Unknown command {line.strip()}; /help lists them (begin with a space to send it as text).",
                  file=sys.stderr)  # fmt: skip
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
