"""Runs the real app (``app.application.run_app``) and watches the screen, not the widgets.

``python -m tests.app.screen_watch OUT_DIR LIMIT_S`` starts Hearth as ``hearth`` does, on the
platform QT_QPA_PLATFORM names, with a fresh worker. While the engine starts it saves how the
composer renders then (``starting.png``); once the app's state is ready it saves how the composer
renders now (``ready.png``) and takes screenshots until the composer's region on the screen shows
that, or LIMIT_S seconds pass. On X11 a screenshot is ``import -window root`` (ImageMagick: what
the X server holds), elsewhere ``QScreen.grabWindow`` (the platform's copy of what was painted).
``report.json`` says when the state became ready and how long after that the screen caught up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, QTimer
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QApplication

POLL_MS = 100
WORKER_ARGS = ("--parallel", "1", "--ctx", "512", "--threads", "1")


def pixels(image: QImage, hole: QRect) -> bytes:
    """The RGB pixels of ``image`` with ``hole`` (the blinking text cursor) painted out.

    Raw bytes, not QImage equality, which also compares colour spaces (a PNG from ImageMagick
    says sRGB, a grab says nothing).
    """
    out = image.convertToFormat(QImage.Format.Format_RGB32)
    painter = QPainter(out)
    painter.fillRect(hole, QColor("black"))
    painter.end()
    return bytes(out.constBits())


def reported(method):
    """Any error in the watch ends the run with that error in the report (not a hang)."""

    def run(self, *args):
        try:
            method(self, *args)
        except Exception:
            self.finish(error=traceback.format_exc())

    return run


class ScreenWatch:
    def __init__(self, out: Path, limit_s: float) -> None:
        self.out = out
        self.limit_s = limit_s
        self.window = None
        self.report: dict = {"platform": QApplication.platformName()}
        self.ready_at = 0.0
        self.expected: QImage | None = None
        self.region = QRect()
        self.hole = QRect()

    @reported
    def find_window(self) -> None:
        from app.main_window import MainWindow

        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)]
        if not windows or not windows[0].windowHandle() or not windows[0].windowHandle().isExposed():
            QTimer.singleShot(10, self.find_window)
            return
        self.window = windows[0]
        engine = self.window.engine
        self.report["state_when_shown"] = engine.state.kind
        self.composer_image().save(str(self.out / "starting.png"))
        self.report["placeholder_when_shown"] = self.window.chats.composer.input.placeholderText()
        self.screenshot(self.out / "shown.png")
        engine.state_changed.connect(self.on_state)
        self.on_state(engine.state)

    def composer_image(self) -> QImage:
        """How the window renders the composer's text box now (with what lies behind it)."""
        viewport = self.window.chats.composer.input.viewport()
        return self.window.grab(QRect(viewport.mapTo(self.window, QPoint(0, 0)), viewport.size())).toImage()

    @reported
    def on_state(self, state) -> None:
        from app.application import seconds_since_launch

        if state.kind == "failed":
            self.finish(error=state.detail)
        elif state.ready and not self.ready_at:
            self.ready_at = time.monotonic()
            self.report["ready_after_launch_s"] = seconds_since_launch()
            composer = self.window.chats.composer
            viewport = composer.input.viewport()
            self.region = QRect(viewport.mapToGlobal(QPoint(0, 0)), viewport.size())
            self.hole = composer.input.cursorRect().adjusted(-3, -3, 3, 3)
            self.expected = self.composer_image()
            self.expected.save(str(self.out / "ready.png"))
            self.report.update(
                placeholder_when_ready=composer.input.placeholderText(),
                region=[self.region.x(), self.region.y(), self.region.width(), self.region.height()],
                cursor=[self.hole.x(), self.hole.y(), self.hole.width(), self.hole.height()],
                device_pixel_ratio=viewport.devicePixelRatioF(),
            )
            QTimer.singleShot(0, self.poll)

    def screenshot(self, path: Path) -> QImage:
        if self.report["platform"] == "xcb":
            subprocess.run(["import", "-window", "root", str(path)], check=True, timeout=30)
            return QImage(str(path))
        screen = self.window.screen().grabWindow(0)
        screen.save(str(path))
        return screen.toImage()

    @reported
    def poll(self) -> None:
        waited = time.monotonic() - self.ready_at
        shot = self.screenshot(self.out / "screen.png")
        self.report["screenshots_after_ready"] = self.report.get("screenshots_after_ready", 0) + 1
        region = shot.copy(self.region)
        if pixels(region, self.hole) == pixels(self.expected, self.hole):
            self.report["screen_ready_after_s"] = waited
            self.finish()
        elif waited > self.limit_s:
            self.report["screen_ready_after_s"] = None
            self.finish()
        else:
            QTimer.singleShot(POLL_MS, self.poll)

    def finish(self, error: str = "") -> None:
        self.report["error"] = error
        (self.out / "report.json").write_text(json.dumps(self.report, indent=2))
        QApplication.quit()


def main(argv: list[str]) -> int:
    out, limit_s = Path(argv[0]), float(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    from app import application
    from app.net.engine import EngineConfig

    app = application.create_application([sys.argv[0]])
    watch = ScreenWatch(out, limit_s)
    QTimer.singleShot(0, watch.find_window)
    code = application.run_app(engine_config=EngineConfig(extra_args=WORKER_ARGS, startup_timeout=240))
    del app
    if "error" not in watch.report:
        watch.finish(error="the app quit before the engine was ready")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
