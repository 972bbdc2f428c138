"""The `hearth` command. Subcommands live in engine.commands; heavy imports happen inside them."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from engine import __version__

# Each module has `register(subparsers)`, which adds its parser with `set_defaults(run=...)`.
COMMAND_MODULES = (
    "engine.commands.bench",
    "engine.commands.chat",
    "engine.commands.create",
    "engine.commands.daemon",
    "engine.commands.fit",
    "engine.commands.folders",
    "engine.commands.docs",
    "engine.commands.gui",
    "engine.commands.hw",
    "engine.commands.import_model",
    "engine.commands.load",
    "engine.commands.log",
    "engine.commands.mcp",
    "engine.commands.models",
    "engine.commands.ps",
    "engine.commands.pull",
    "engine.commands.remote",
    "engine.commands.rm",
    "engine.commands.search",
    "engine.commands.serve",
    "engine.commands.show",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hearth",
        description="Run language models on your own machine. With no command, opens the app.",
    )
    parser.add_argument("--version", action="version", version=f"hearth {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _default_command(parser: argparse.ArgumentParser) -> list[str]:
    """With no command: the desktop app where it is installed, else a chat in the terminal."""
    if "engine.commands.gui" in COMMAND_MODULES:
        return ["gui"]
    return ["chat"]


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command's own parser that ``args`` came through: `hearth daemon up`'s, not `hearth`'s."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if not subs or not isinstance(name, str) or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


#: Flags with an optional value of a few words: the next word is the flag's only when it is one of them, as Ollama's
#: CLI reads ``--think`` (so `hearth chat qwen3 --think "Why?"` asks the question, thinking).
_WORD_FLAGS = {"--think": ("true", "false", "low", "medium", "high")}


def _word_flags(argv: list[str]) -> list[str]:
    out = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        words = _WORD_FLAGS.get(arg)
        if words is not None and (i + 1 == len(argv) or argv[i + 1].strip().lower() not in words):
            arg = f"{arg}=true"
        out.append(arg)
    return out


def _intermixed(own: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]) -> list[str]:
    """The words of ``unknown`` that are left once each fills an optional positional its command's parser left empty,
    the rest going to a positional of any number of words (argparse reads a command's positionals in one run, so
    ``hearth chat llama3.2 --local "Hello"`` had the message as an unknown word, where ``ollama run llama3.2 --verbose
    "Hello"`` reads both); a word after an unknown flag is that flag's."""
    empty = [a for a in own._actions if not a.option_strings and (
        (a.nargs == "?" and getattr(args, a.dest, None) is None) or a.nargs == "*")]  # fmt: skip
    left: list[str] = []
    for i, word in enumerate(unknown):
        after_flag = i > 0 and unknown[i - 1].startswith("-") and "=" not in unknown[i - 1]
        if empty and not word.startswith("-") and not after_flag:
            if empty[0].nargs == "*":  # the rest of the words
                setattr(args, empty[0].dest, [*(getattr(args, empty[0].dest, None) or []), word])
            else:
                setattr(args, empty.pop(0).dest, word)
        else:
            left.append(word)
    return left


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; what the command does not know is refused by that command's parser, with its usage and
    the option meant where one is close (``--temprature``: did you mean --temperature?)."""
    args, unknown = parser.parse_known_args(_word_flags(argv))
    if unknown:
        unknown = _intermixed(_innermost(parser, args), args, unknown)
    if unknown:
        import difflib

        own = _innermost(parser, args)
        message = f"unrecognized arguments: {' '.join(unknown)}"
        flags = [a for a in unknown if a.startswith("--")]
        known = [o for a in own._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(flags[0].split("=", 1)[0], known, n=1) if flags else []
        own.error(f"{message} (did you mean {close[0]}?)" if close else message)
    return args


def main(argv: list[str] | None = None) -> int:
    from engine.errors import HearthError

    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(parser, argv)
    if args.command is None:
        args = _parse(parser, [*argv, *_default_command(parser)])
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.run(args) or 0)
    except HearthError as exc:
        print(f"hearth: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hearth models | head`: the reader has what it wanted; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor at exit, when stdout is flushed
        return 141  # as a shell reports a command SIGPIPE stopped


if __name__ == "__main__":
    sys.exit(main())
