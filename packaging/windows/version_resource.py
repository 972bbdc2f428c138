"""Hearth.exe's version resource: packaging/windows/version_info.txt with the version filled in.

packaging/hearth.spec writes :func:`render`'s text to a file and hands it to PyInstaller's EXE(version=...).
"""

from __future__ import annotations

from pathlib import Path

TEMPLATE = Path(__file__).with_name("version_info.txt")


def render(version: str) -> str:
    """The version resource for ``version`` (``MAJOR.MINOR.PATCH``; Windows wants four numbers)."""
    numbers = [int(part) for part in version.split(".")[:4] if part.isdigit()]
    four = tuple((numbers + [0, 0, 0, 0])[:4])
    text = TEMPLATE.read_text(encoding="utf-8")
    return text.replace("@VERSION_TUPLE@", repr(four)).replace("@VERSION@", version)
