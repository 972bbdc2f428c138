"""Can Qt open a window here? Checked before the QApplication exists, because Qt aborts the
process (it does not raise) when its platform plugin cannot load.

On Linux, Qt's X11 plugin (xcb) links X11 libraries that a desktop often lacks; since Qt 6.5,
libxcb-cursor0 most of all. Without them Qt prints "could not load the Qt platform plugin
xcb" and aborts. This module names the Debian/Ubuntu packages to install instead. It imports
no Qt, so it can run before Qt loads anything.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["XCB_LIBRARIES", "display_problem", "missing_xcb_packages", "will_use_xcb"]

# The libraries Qt's xcb plugin links (libqxcb.so, libQt6XcbQpa.so) that Debian and Ubuntu ship
# in packages of their own, by soname, with the package that holds each.
XCB_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("libxcb-cursor.so.0", "libxcb-cursor0"),
    ("libxcb-icccm.so.4", "libxcb-icccm4"),
    ("libxcb-keysyms.so.1", "libxcb-keysyms1"),
    ("libxcb-image.so.0", "libxcb-image0"),
    ("libxcb-render-util.so.0", "libxcb-render-util0"),
    ("libxcb-util.so.1", "libxcb-util1"),
    ("libxcb-shape.so.0", "libxcb-shape0"),
    ("libxcb-xkb.so.1", "libxcb-xkb1"),
    ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
)


def _beside_qt() -> list[Path]:
    """Folders Qt's plugin also finds libraries in: Qt's own lib folder (its RUNPATH) and, in
    the frozen app, the bundle's folder (PyInstaller's bootloader adds it to LD_LIBRARY_PATH
    too, so this is a second chance)."""
    folders = []
    spec = importlib.util.find_spec("PySide6")  # finds the package without importing Qt
    if spec is not None and spec.submodule_search_locations:
        folders.append(Path(next(iter(spec.submodule_search_locations))) / "Qt" / "lib")
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        folders.append(Path(bundle))
    return folders


def _loads(soname: str) -> bool:
    """Whether ``soname`` can be loaded as Qt's plugin would load it."""
    for candidate in (soname, *(str(folder / soname) for folder in _beside_qt() if (folder / soname).is_file())):
        try:
            ctypes.CDLL(candidate)
        except OSError:
            continue
        return True
    return False


def will_use_xcb(env: Mapping[str, str], *, system: str = sys.platform) -> bool:
    """Whether Qt will open its windows through X11 (xcb) and nothing else.

    ``QT_QPA_PLATFORM`` decides when set: only a plain ``xcb`` counts, because with a list
    (``wayland;xcb``) Qt tries the next plugin when one fails. Unset, Qt uses Wayland in a
    Wayland session and X11 otherwise.
    """
    if not system.startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen.split(":", 1)[0] == "xcb"
    return not (env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE") == "wayland")


def missing_xcb_packages(loads: Callable[[str], bool] = _loads) -> list[str]:
    """The Debian/Ubuntu packages whose libraries Qt's xcb plugin needs and cannot find.

    Args:
        loads: says whether a library (by soname) can be loaded; the default asks the
            dynamic linker.
    """
    return [package for soname, package in XCB_LIBRARIES if not loads(soname)]


def display_problem(
    env: Mapping[str, str] | None = None,
    *,
    system: str = sys.platform,
    loads: Callable[[str], bool] = _loads,
) -> str | None:
    """One sentence saying why the app cannot open its window here and what to do; None when it can.

    Args:
        env: the environment Qt will see (default: this process's).
        system: ``sys.platform`` of the machine.
        loads: says whether a library (by soname) can be loaded; the default asks the
            dynamic linker.
    """
    env = os.environ if env is None else env
    if not will_use_xcb(env, system=system):
        return None
    if not env.get("DISPLAY"):
        return (
            "Hearth found no display to open its window on (DISPLAY is not set): start it from a desktop "
            "session, or use `hearth chat` or `hearth serve` in a terminal."
        )
    missing = missing_xcb_packages(loads)
    if not missing:
        return None
    names = " ".join(missing)
    return (
        f"Hearth's window needs X11 libraries this system lacks ({names}): "
        f"install them with `sudo apt-get install {names}` (Debian/Ubuntu) and start Hearth again."
    )
