"""What a person types at a terminal conversation's ``> `` prompt, or what is piped in instead: one reader for
`hearth chat` and its MCP mode."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping

#: What leaves a conversation typed at the prompt, as in ``ollama run``.
LEAVE = frozenset({"/bye", "/exit", "/quit"})
MAX_PIPED_CHARS = 8 << 20  # of text piped in beside a message: more than any model's context holds
HELP = ("/clear starts the conversation over; /bye leaves (also /exit, /quit, Ctrl-D); Ctrl-C stops an answer; "
        '""" begins a message of several lines and """ ends it; /? or /help shows this.')
HISTORY_LINES = 1000  # of what was typed at the prompt, kept between conversations
QUOTES = '"""'  # around a message of several lines, as in ``ollama run``
COMMANDS_HELP = (" /set system TEXT sets the system prompt; /set parameter NAME VALUE sets temperature, top_p, seed "
                 "or num_predict for the answers after; /set format json, /set noformat, /set think, /set nothink, /set verbose "
                 "and /set quiet switch those; /show parameters and /show system say what is set, /show info what the model is; /load MODEL "
                 "goes on with another model (the conversation starts over); /save NAME makes the model NAME from this "
                 "one, with the settings and the conversation so far.")


def typed_lines(
    greeting: str, clear: Callable[[], None] | None = None, commands: Mapping[str, Callable[[str], str]] | None = None
) -> Iterator[str]:
    """The lines a person types at ``> `` after ``greeting`` (on stderr), blank ones left out: Ctrl-C at the prompt
    starts a new line, Ctrl-D or ``/bye`` ends, ``/clear`` calls ``clear`` (the caller forgets the conversation so
    far, as ``ollama run``'s ``/clear``), ``/help`` says so; another ``/word`` is named as unknown, not sent; the lines
    between two ``QUOTES`` (three double quotes) are one message, as ``ollama run`` reads them (a pasted text with its questions).
    ``commands`` (``/set``, ``/show``, ``/load``, ``/save``) each take the rest of their line and give the sentence said. (Ctrl-C during an
    answer is the caller's: it stops that answer.)"""
    print(f"{greeting} Ctrl-C stops an answer, /bye or Ctrl-D leaves.", file=sys.stderr)
    keep = _line_editing()
    try:
        yield from _read(clear, commands, keep)
    finally:
        keep()


def _line_editing() -> Callable[[], None]:
    """At a terminal, the prompt's line editing (arrow keys, Ctrl-A/E, Ctrl-R) and the history of what was typed,
    kept in the data folder as ``ollama run`` keeps ``~/.ollama/history`` (private to its owner; not kept with
    ``HEARTH_NOHISTORY`` set). Returns what adds the lines typed since it was last called to the file, called after
    each line as ``ollama run`` writes its history (a terminal closed mid-chat keeps them). Nothing where readline is
    missing (Windows): the prompt then reads plain lines."""
    if not sys.stdin.isatty():
        return lambda: None
    try:
        import readline
    except ImportError:
        return lambda: None
    # A pasted text of several lines is one message, as `ollama run` reads it (Python turns bracketed paste off): GNU
    # readline's setting (macOS's libedit has other commands), not on a dumb terminal (Emacs' shell would show it).
    if "libedit" not in (readline.__doc__ or "") and os.environ.get("TERM", "dumb") != "dumb":
        readline.parse_and_bind("set enable-bracketed-paste on")
    if os.environ.get("HEARTH_NOHISTORY", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return lambda: None
    from engine.paths import hearth_home, private_file

    path = hearth_home() / "history"
    try:
        readline.read_history_file(path)
    except OSError:  # none yet, or unreadable: a history starts now
        pass
    readline.set_history_length(HISTORY_LINES)
    kept = readline.get_current_history_length()

    def keep() -> None:  # the lines typed since (two chats at once keep both), the file kept to its length
        nonlocal kept
        now = readline.get_current_history_length()
        if now == kept:
            return
        try:
            if hasattr(readline, "append_history_file"):
                readline.append_history_file(max(0, now - kept), private_file(path))
            else:  # a readline without it (some libedit builds): the whole history written
                readline.write_history_file(private_file(path))
        except OSError:
            pass
        kept = now

    return keep


def _read(
    clear: Callable[[], None] | None, commands: Mapping[str, Callable[[str], str]] | None, keep: Callable[[], None]
) -> Iterator[str]:
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        keep()
        word = line.strip().lower()
        if word in LEAVE:
            return
        if word in ("/?", "/help"):
            print(HELP + (COMMANDS_HELP if commands else ""), file=sys.stderr)
            continue
        head, _, rest = line.rstrip().partition(" ")  # (a leading space sends the line as text)
        if commands and head.lower() in commands:
            what, _, value = rest.partition(" ")
            if head.lower() == "/set" and what == "system" and value.lstrip().startswith(QUOTES):  # as `ollama run`
                text = _quoted(value.lstrip()[len(QUOTES) :], keep)  # the lines up to the closing quotes
                if text is None:
                    continue
                rest = f"system {text}"
            print(commands[head.lower()](rest.strip()), file=sys.stderr)
            continue
        if word == "/clear" and clear is not None:
            clear()
            print("The conversation starts over.", file=sys.stderr)
            continue
        if line.startswith("/") and len(word.split()) == 1 and word[1:].isalpha():
            print(f"Unknown command {line.strip()}; /help lists them (begin with a space to send it as text).",
                  file=sys.stderr)  # fmt: skip
            continue
        if line.lstrip().startswith(QUOTES):
            line = _quoted(line.lstrip()[len(QUOTES) :], keep)
            if line is None:
                continue
        if line.strip():
            yield line


def _quoted(first: str, keep: Callable[[], None]) -> str | None:
    """The message of several lines that began with :data:`QUOTES` followed by ``first``: the lines typed at
    ``... `` up to one that ends with them (on the same line, quotes, text and quotes are that text), joined by
    newlines. None: Ctrl-C left it; Ctrl-D ends it where it is."""
    lines: list[str] = []
    line = first
    while True:
        if line.rstrip().endswith(QUOTES):
            lines.append(line.rstrip()[: -len(QUOTES)])
            return "\n".join(lines)
        if lines or line.strip():  # (the quotes alone on the first line open it)
            lines.append(line)
        try:
            line = input("... ")
        except EOFError:
            print(file=sys.stderr)
            return "\n".join(lines)
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return None
        keep()


def leave_out_oldest(history: list[dict]) -> bool:
    """Drop the oldest exchange of a terminal conversation's ``history`` (a user message and what followed it up to
    the next one), never a system message nor the last message, when it has outgrown the model's context: the
    conversation goes on, as `ollama run`'s does. False where nothing is left to drop."""
    first = next((i for i, m in enumerate(history) if m["role"] != "system"), len(history))
    end = first + 1
    while end < len(history) - 1 and history[end]["role"] != "user":
        end += 1
    if end >= len(history):  # the message asked is all there is
        return False
    del history[first:end]
    return True


#: Said (dimmed) when a terminal conversation first leaves turns out.
LEFT_OUT = "(earlier messages left out to fit the model's context)"


def piped_message() -> str | None:
    """Standard input read whole, as one message, where it is not a terminal (``echo hi | hearth chat``,
    ``hearth chat < notes.txt``, as ``ollama run`` takes it); None at a terminal, where the conversation is typed.
    An empty one is ``""``."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    return sys.stdin.read().strip()


def piped_text(wait: float = 0.5) -> str | None:
    """What standard input holds where it is a file or a pipe something is written to (``cat notes.txt | hearth
    chat "Summarize"``, ``hearth chat "Summarize" < notes.txt``), read whole; None at a terminal, and where nothing
    comes within ``wait`` seconds: a pipe held open and never written (a job runner's, ssh's) is left unread
    rather than waited on for ever."""
    import os
    import select
    import stat

    if sys.stdin is None or sys.stdin.isatty():
        return None
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return None
        if not stat.S_ISREG(mode) and not select.select([sys.stdin], [], [], wait)[0]:
            return None
        return sys.stdin.read(MAX_PIPED_CHARS).strip() or None
    except (OSError, ValueError):  # no descriptor (an embedding host's stream), or one closed
        return None


__all__ = ["piped_message", "piped_text", "typed_lines"]
