"""Before Qt aborts on a desktop without its X11 libraries, Hearth says what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.display import XCB_LIBRARIES, display_problem, missing_xcb_packages, will_use_xcb

X11_DESKTOP = {"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}


def only_missing(*sonames: str):
    asked: list[str] = []

    def loads(soname: str) -> bool:
        asked.append(soname)
        return soname not in sonames

    loads.asked = asked
    return loads


def test_a_desktop_without_libxcb_cursor_is_told_the_one_package_to_install():
    problem = display_problem(X11_DESKTOP, system="linux", loads=only_missing("libxcb-cursor.so.0"))
    assert problem is not None
    assert "`sudo apt-get install libxcb-cursor0`" in problem
    assert "libxcb-icccm4" not in problem
    assert problem.count(".") == 1 and problem.endswith("again.")  # one sentence


def test_every_missing_library_is_named_in_one_install_command():
    problem = display_problem(X11_DESKTOP, system="linux", loads=only_missing("libxcb-cursor.so.0", "libxcb-keysyms.so.1"))
    assert "`sudo apt-get install libxcb-cursor0 libxcb-keysyms1`" in problem


def test_a_desktop_with_the_libraries_starts_the_app():
    loads = only_missing()
    assert display_problem(X11_DESKTOP, system="linux", loads=loads) is None
    assert set(loads.asked) == {soname for soname, _ in XCB_LIBRARIES}


@pytest.mark.parametrize(
    "env",
    [
        {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"},  # a Wayland session: Qt uses Wayland
        {"XDG_SESSION_TYPE": "wayland"},
        {"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"},
        {"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland;xcb"},  # Qt falls back along the list itself
    ],
)
def test_no_x11_check_where_qt_will_not_use_x11(env):
    loads = only_missing("libxcb-cursor.so.0")
    assert display_problem(env, system="linux", loads=loads) is None
    assert loads.asked == []


def test_x11_asked_for_by_name_is_checked_even_in_a_wayland_session():
    env = {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0", "QT_QPA_PLATFORM": "xcb"}
    assert will_use_xcb(env, system="linux")
    assert "libxcb-cursor0" in display_problem(env, system="linux", loads=only_missing("libxcb-cursor.so.0"))


@pytest.mark.parametrize("system", ["darwin", "win32"])
def test_other_systems_are_not_checked(system):
    assert display_problem(X11_DESKTOP, system=system, loads=only_missing("libxcb-cursor.so.0")) is None


def test_no_display_at_all_says_where_hearth_can_run():
    problem = display_problem({"XDG_SESSION_TYPE": "tty"}, system="linux", loads=only_missing())
    assert "DISPLAY is not set" in problem and "`hearth chat`" in problem


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 is checked on Linux only")
def test_hearth_gui_without_a_display_exits_with_the_sentence_instead_of_qt_aborting(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update(QT_QPA_PLATFORM="xcb", HEARTH_HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "gui"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr  # Qt's own failure is an abort (-6)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hearth: Hearth found no display"), done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 is checked on Linux only")
def test_the_real_lookup_finds_libraries_beside_qts_own_and_not_made_up_ones():
    from app import display

    assert display._loads("libQt6Core.so.6")  # in PySide6's Qt/lib, where Qt's plugin looks too
    assert not display._loads("libhearth-no-such-library.so.0")


def _installed_xcb_cursor() -> Path | None:
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        path = Path(folder) / "libxcb-cursor.so.0"
        if path.exists():
            return path.resolve()
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 is checked on Linux only")
def test_hearth_on_an_x11_desktop_without_libxcb_cursor_names_the_package_instead_of_aborting(tmp_path):
    """The library is really gone for the app: hidden under /dev/null in a mount namespace of its own."""
    library = _installed_xcb_cursor()
    unshare = shutil.which("unshare")
    if library is None or unshare is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare and an installed libxcb-cursor0 to hide from the app")
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE")}
    env.update(DISPLAY=":99", HEARTH_HOME=str(tmp_path))  # the check comes before Qt looks for the display
    script = f'mount --bind /dev/null "{library}" || exit 99; exec "{sys.executable}" -m engine.cli'
    done = subprocess.run([unshare, "-m", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode == 99:
        pytest.skip(f"this machine does not allow a private mount namespace: {done.stderr.strip()}")
    assert done.returncode == 1, done.stderr  # Qt alone: "could not load the Qt platform plugin" and SIGABRT
    # libxcb-cursor0 first, then whichever others this machine lacks as well
    packages = " ".join(["libxcb-cursor0", *(p for p in missing_xcb_packages() if p != "libxcb-cursor0")])
    assert done.stderr.strip() == (
        f"hearth: Hearth's window needs X11 libraries this system lacks ({packages}): "
        f"install them with `sudo apt-get install {packages}` (Debian/Ubuntu) and start Hearth again."
    )
