"""Durations as people write them: seconds (``90``, ``1.5``) or Go-style units (``10m``, ``1h30m``, ``500ms``).

One reader for `hearth load --ttl`, `hearth serve --idle-ttl` and whatever else takes a keep-alive, so
``10m`` means the same everywhere. ``never`` (how long a model stays loaded with no expiry) is the
callers' word, not a duration.
"""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # seconds: no sign, exponent, infinity or NaN
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> float | None:
    """``text`` in seconds: a number of seconds or a sum of ``N`` + unit parts (``1h30m``, units in lower
    case as Go writes them); None when it is neither (the caller says what it takes): a sign, an exponent,
    ``inf`` and ``nan`` included."""
    text = text.strip()
    if not text:
        return None
    if _NUMBER.fullmatch(text):
        seconds = float(text)
    else:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(text):
            if match.start() != pos:
                return None
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(text):
            return None
    return None if math.isinf(seconds) else seconds


def describe_duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: ``45 s``, ``10 min``, ``2 h 5 min``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


__all__ = ["describe_duration", "parse_duration"]
