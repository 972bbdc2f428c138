"""What the screen shows, not what a grab() renders: the composer says "Send a message…" once the
engine is ready, on a real X server (Xvfb, Qt's xcb platform) and offscreen.

grab() paints a widget afresh, so it shows the ready composer even when the window on the screen
still says "Starting the engine…" (QPlainTextEdit does not repaint a placeholder that changes
while shown). These tests look at the screen: ImageMagick's ``import -window root`` on X11,
``QScreen.grabWindow`` (the platform's copy of what was painted) offscreen.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QImage

from app.display import missing_xcb_packages
from app.widgets.composer import Composer
from tests.app.conftest import X11_SKIP_PREFIX
from tests.app.screen_watch import pixels

ROOT = Path(__file__).resolve().parents[2]
SCREEN_LIMIT_S = 20  # the screen catches up within a few hundred ms, or never


def x11_unavailable() -> str | None:
    """Why the X11 window test cannot run here (what to install), or None."""
    missing = [package for tool, package in (("Xvfb", "xvfb"), ("import", "imagemagick")) if not shutil.which(tool)]
    missing += missing_xcb_packages()
    if not missing:
        return None
    names = " ".join(missing)
    return f"{X11_SKIP_PREFIX} {names} not installed (Debian/Ubuntu: sudo apt-get install {names})"


@contextmanager
def xvfb(screen: str = "1440x1000x24"):
    """A private X server on a free display number; its DISPLAY value."""
    read_end, write_end = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_end), "-screen", "0", screen, "-nolisten", "tcp"],
        pass_fds=(write_end,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    try:
        number = b""
        while not number.endswith(b"\n"):
            ready, _, _ = select.select([read_end], [], [], 30)
            chunk = os.read(read_end, 16) if ready else b""
            if not chunk:
                raise RuntimeError("Xvfb did not start")
            number += chunk
        yield f":{number.decode().strip()}"
    finally:
        os.close(read_end)
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.slow
def test_the_x11_screen_shows_the_ready_composer_once_the_engine_is_ready(tmp_path):
    reason = x11_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "screen"
    with xvfb() as display:
        env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_SCALE_FACTOR")}
        env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb", HEARTH_HOME=str(tmp_path / "home"))
        done = subprocess.run(
            [sys.executable, "-m", "tests.app.screen_watch", str(out), str(SCREEN_LIMIT_S)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["platform"] == "xcb" and not report["error"], report
    assert report["placeholder_when_shown"] == "Starting the engine…"
    assert report["placeholder_when_ready"] == "Send a message…"

    # The last screenshot of the whole X screen, where the composer's text box is.
    screen = QImage(str(out / "screen.png")).copy(QRect(*report["region"]))
    cursor = QRect(*report["cursor"])
    ready = pixels(QImage(str(out / "ready.png")), cursor)
    assert ready != pixels(QImage(str(out / "starting.png")), cursor)  # the two states look different
    assert pixels(screen, cursor) == ready, (
        f"{SCREEN_LIMIT_S} s after the engine was ready the screen still showed the old composer "
        f"(screenshots in {out})"
    )
    assert report["screen_ready_after_s"] is not None


def test_the_offscreen_window_shows_the_ready_composer(qtbot, theme):
    composer = Composer(theme.colors)
    qtbot.addWidget(composer)
    composer.resize(720, 110)
    composer.set_engine_ready(False, "Starting the engine…")
    composer.show()
    qtbot.waitExposed(composer)

    def box() -> QRect:  # where the text box is now (the layout may still be settling)
        viewport = composer.input.viewport()
        return QRect(viewport.mapTo(composer, QPoint(0, 0)), viewport.size())

    def cursor() -> QRect:  # the blinking text cursor, left out of the comparisons
        return composer.input.cursorRect().adjusted(-3, -3, 3, 3)

    def on_screen() -> bytes:
        b = box()
        shot = composer.screen().grabWindow(composer.winId(), b.x(), b.y(), b.width(), b.height())
        if shot.isNull():
            return b""  # nothing flushed to the screen yet
        return pixels(shot.toImage(), cursor())

    def rendered() -> bytes:
        return pixels(composer.grab(box()).toImage(), cursor())

    qtbot.waitUntil(lambda: on_screen() == rendered(), timeout=5000)
    starting = on_screen()
    composer.set_engine_ready(True)
    assert rendered() != starting
    qtbot.waitUntil(lambda: on_screen() == rendered(), timeout=5000)
    assert composer.input.placeholderText() == "Send a message…"
