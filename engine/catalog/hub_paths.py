"""File names from a hub listing, checked before anything is written.

A hub or mirror is not trusted with where files go: every name in a listing must be a plain relative
path (``/``-separated, no ``..`` or ``.`` parts, not absolute, no drive, no backslash, no NUL), and
every path built from one must resolve inside the folder it is meant for. Used by the hub client (a
listing with such a name is refused whole) and by downloads (every path they write, also those of a
download stored before this check existed).
"""

from __future__ import annotations

import re
from pathlib import Path, PureWindowsPath

from engine.errors import UnsafeHubPath

_DRIVE = re.compile(r"^[A-Za-z]:")


def is_safe_name(name: str) -> bool:
    """Whether ``name`` is a relative path that stays below the folder it is joined to, on any OS."""
    if not name or "\\" in name or "\0" in name or name.startswith("/") or _DRIVE.match(name):
        return False
    if PureWindowsPath(name).drive or PureWindowsPath(name).root:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def check_name(name: str, *, repo: str | None = None, endpoint: str | None = None) -> str:
    """``name`` when it is safe (see :func:`is_safe_name`).

    Raises:
        UnsafeHubPath: it is not.
    """
    if not is_safe_name(name):
        raise UnsafeHubPath(name, repo=repo, endpoint=endpoint)
    return name


def inside(root: Path, name: str, *, suffix: str = "", repo: str | None = None) -> Path:
    """``root / name + suffix``, checked to resolve below ``root`` (symbolic links followed).

    Raises:
        UnsafeHubPath: ``name`` is not safe, or the path resolves outside ``root``.
    """
    check_name(name, repo=repo)
    path = root.joinpath(*name.split("/"))
    path = path.with_name(path.name + suffix) if suffix else path
    base = root.resolve()
    if not path.resolve().is_relative_to(base) or path.resolve() == base:
        raise UnsafeHubPath(name, repo=repo)
    return path


__all__ = ["check_name", "inside", "is_safe_name"]
