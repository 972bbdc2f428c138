"""Numbers as people read them: sizes, durations, counts."""

from __future__ import annotations


def human_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit in ("B", "KB") or value >= 100 else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def human_duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "—"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def human_count(n: int | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return str(n)


def counted(n: int, noun: str, nouns: str = "") -> str:
    """``n`` and the noun, singular for one: "1 token", "2 tokens" (``nouns``, when not just noun + "s")."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def human_rate(bytes_per_second: float) -> str:
    return f"{human_bytes(bytes_per_second)}/s" if bytes_per_second else "—"
