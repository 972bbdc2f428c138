"""The numbers and names a person gives Hearth, checked once where they enter, the same way by every front end.

The CLI's flags take these rules as their argparse ``type`` (through :func:`cli_type`), the admin API's
bodies and saved load settings check with them, and the app's dialogs send their values to that API: a
port of 99999, a context of -1 or an idle time of -5 is refused with the same sentence wherever it is
typed, before anything starts. Each refusal is one :class:`~engine.errors.InvalidRequest` sentence that
names the value and says what it may be.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from engine.durations import parse_duration
from engine.errors import InvalidRequest

T = TypeVar("T")

MAX_CTX = 1 << 28  # past it no plan could fit; below it the plan says what would
NEVER = "never"
MAX_KEEP_ALIVE = 365 * 86400.0  # longer is 'never' in all but name


@dataclass(frozen=True, slots=True)
class WholeNumber:
    """A whole number from ``low`` to ``high`` (None: no upper bound), called ``name`` in the refusal."""

    name: str
    low: int
    high: int | None = None
    high_words: str | None = None  # how the sentence says ``high`` ("the CPU threads of this machine")

    def sentence(self, name: str | None = None) -> str:
        label = name or self.name
        if self.high is None:
            return f"'{label}' must be a whole number of at least {self.low}."
        return f"'{label}' must be a whole number from {self.low} to {self.high_words or self.high}."

    def check(self, value: object, *, name: str | None = None) -> int:
        """``value``, when it is a whole number in range.

        Raises:
            InvalidRequest: it is not.
        """
        if isinstance(value, bool) or not isinstance(value, int) or value < self.low or (
            self.high is not None and value > self.high
        ):
            raise InvalidRequest(self.sentence(name), param=name or self.name)
        return value

    def parse(self, text: str) -> int:
        """The number ``text`` spells, checked.

        Raises:
            InvalidRequest: it is no whole number, or out of range.
        """
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidRequest(self.sentence(), param=self.name) from None
        return self.check(value)


@dataclass(frozen=True, slots=True)
class Fraction:
    """A number from ``low`` to ``high`` (a temperature, a probability, a timeout)."""

    name: str
    low: float
    high: float

    def sentence(self) -> str:
        return f"'{self.name}' must be a number from {self.low:g} to {self.high:g}."

    def check(self, value: object) -> float:
        """``value``, when it is a number in range.

        Raises:
            InvalidRequest: it is not.
        """
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not (
            self.low <= value <= self.high
        ):
            raise InvalidRequest(self.sentence(), param=self.name)
        return float(value)

    def parse(self, text: str) -> float:
        """The number ``text`` spells, checked.

        Raises:
            InvalidRequest: it is no number, or out of range.
        """
        try:
            value = float(text.strip())
        except ValueError:
            raise InvalidRequest(self.sentence(), param=self.name) from None
        return self.check(value)


PORT = WholeNumber("port", 0, 65535)
CTX = WholeNumber("ctx", 16, MAX_CTX)
PARALLEL = WholeNumber("parallel", 1, 1024)  # llama.cpp itself takes up to 256 and says so at load
THREADS = WholeNumber("threads", 1, os.cpu_count() or 1, "the CPU threads of this machine")
BATCH = WholeNumber("batch", 1, 1 << 16)
GPU_LAYERS = WholeNumber("gpu_layers", 0, 100_000)
MAX_TOKENS = WholeNumber("max_tokens", 1, MAX_CTX)
COUNT = WholeNumber("count", 1, 1_000_000)
QUEUE = WholeNumber("max_waiting", 0, 1_000_000)  # 0: no request waits beyond those that run
SEED = WholeNumber("seed", 0, 2**32 - 1)
REASONING_BUDGET = WholeNumber("reasoning_budget", 0, MAX_CTX)  # tokens of thinking (0: closed as it opens)
BODY_BYTES = WholeNumber("max_body", 1024, 1 << 34)
TEMPERATURE = Fraction("temperature", 0.0, 2.0)
TOP_P = Fraction("top_p", 0.0, 1.0)
ROPE_SCALE = Fraction("rope_scale", 1.0, 64.0)
SECONDS = Fraction("timeout", 0.001, 86400.0 * 7)


def keep_alive(text: str | float, *, name: str = "ttl") -> float | None:
    """How long a model stays loaded when idle, as typed (or sent in JSON): seconds, a duration (``10m``,
    ``1h``) or ``never`` (None).

    Raises:
        InvalidRequest: anything else, a negative time included.
    """
    if not isinstance(text, str):
        text = repr(text)  # a JSON number reads as typed seconds; anything else is refused below as it was sent
    if text.strip().lower() == NEVER:
        return None
    seconds = parse_duration(text)
    if seconds is None or seconds > MAX_KEEP_ALIVE:
        raise InvalidRequest(
            f"'{name}' must be seconds (0 or more), a duration such as '10m' or '1h' (a year at most), or 'never'; "
            f"got '{text}'.",
            param=name,
        )
    return seconds


def request_keep_alive(value: object, *, name: str = "keep_alive") -> float | None:
    """A request's ``keep_alive`` (Ollama's field, taken by every dialect) as the pool's keep-alive: seconds,
    or -1 for never (a negative number, as Ollama reads it, or ``never``); None when the request gave none.

    Raises:
        InvalidRequest: not a time.
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds: float | None = float(value)
    elif isinstance(value, str):
        if value.strip().lower() == NEVER:
            return -1.0
        seconds = parse_duration(value)
    else:
        seconds = None
    if seconds is None or math.isnan(seconds):
        raise InvalidRequest(
            f"'{name}' must be seconds, a duration such as '10m' or '1h', or 'never' (a negative number: never); "
            f"got {value!r}.",
            param=name,
        )
    return -1.0 if seconds < 0 or seconds > MAX_KEEP_ALIVE else seconds  # past a year: never, in all but name


# A name a person picks for a model: a word, optionally with one ':TAG' (Ollama's and Hearth's form).
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?::[A-Za-z0-9][A-Za-z0-9._-]*)?")
MAX_NAME_LENGTH = 128


def model_name(text: str, *, name: str = "name") -> str:
    """``text`` when it can name a model: letters, digits, '.', '_' and '-', with at most one ':TAG'.

    A '/' is kept for the Hub's ``OWNER/REPO`` and the remote providers' ``PROVIDER/MODEL``, so a name of
    one's own never looks like either.

    Raises:
        InvalidRequest: it cannot.
    """
    if len(text) > MAX_NAME_LENGTH or not _MODEL_NAME.fullmatch(text):
        raise InvalidRequest(
            f"'{text}' cannot name a model; use letters, digits, '.', '_' and '-', with at most one ':TAG' "
            f"(e.g. 'my-model:q4'), up to {MAX_NAME_LENGTH} characters.",
            param=name,
        )
    return text


def cli_type(parse: Callable[[str], T], name: str | None = None) -> Callable[[str], T]:
    """``parse`` as an argparse ``type``: its refusal is argparse's one-line usage error (exit status 2)."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except InvalidRequest as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name or getattr(parse, "__name__", "value")
    convert.checks = True  # type: ignore[attr-defined]  # what the CLI's walk of every flag looks for
    return convert


def whole(rule: WholeNumber, name: str | None = None) -> Callable[[str], int]:
    """The CLI ``type`` of a :class:`WholeNumber` (``name``: the flag's word for it in the refusal)."""
    rule = replace(rule, name=name) if name else rule
    return cli_type(rule.parse, rule.name)


def number(rule: Fraction, name: str | None = None) -> Callable[[str], float]:
    """The CLI ``type`` of a :class:`Fraction` (``name``: the flag's word for it in the refusal)."""
    rule = replace(rule, name=name) if name else rule
    return cli_type(rule.parse, rule.name)


__all__ = [
    "BATCH", "BODY_BYTES", "COUNT", "CTX", "GPU_LAYERS", "MAX_CTX", "MAX_KEEP_ALIVE", "MAX_TOKENS", "NEVER", "PARALLEL", "QUEUE",
    "PORT", "ROPE_SCALE", "SECONDS", "SEED", "TEMPERATURE", "THREADS", "TOP_P", "Fraction", "WholeNumber", "cli_type",
    "keep_alive", "model_name", "number", "request_keep_alive", "whole",
]  # fmt: skip
