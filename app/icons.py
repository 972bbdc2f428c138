"""The app's SVG icons (resources/icons), tinted to the theme's colours.

The icons are single-colour line drawings that use ``currentColor``; :func:`icon` swaps in a
colour and renders them crisp at any size. ``resources/`` sits beside the packages in a source
checkout or an editable install; a frozen app or a packaged install points HEARTH_RESOURCES at it.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from PySide6.QtCore import QByteArray, QRectF, QSize, QStandardPaths, Qt
from PySide6.QtGui import QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

SIZES = (16, 20, 24, 32, 48)


def resources_dir() -> Path:
    """The resources folder: HEARTH_RESOURCES, the frozen bundle's, or the checkout's.

    Raises:
        FileNotFoundError: none of them has the icons (a broken install).
    """
    candidates = []
    if os.environ.get("HEARTH_RESOURCES"):
        candidates.append(Path(os.environ["HEARTH_RESOURCES"]))
    if getattr(sys, "_MEIPASS", None):
        candidates.append(Path(sys._MEIPASS) / "resources")
    candidates.append(Path(__file__).resolve().parents[1] / "resources")
    candidates.append(Path(sys.prefix) / "share" / "hearth" / "resources")
    for path in candidates:
        if (path / "icons" / "app.svg").is_file():
            return path
    raise FileNotFoundError(
        "Hearth's icons were not found (looked in " + ", ".join(str(c) for c in candidates) + "); reinstall Hearth."
    )


@functools.cache
def _svg(name: str) -> str:
    return (resources_dir() / "icons" / f"{name}.svg").read_text(encoding="utf-8")


def _render(svg: str, size: int, ratio: float = 2.0) -> QPixmap:
    renderer = QSvgRenderer(QByteArray(svg.encode()))
    pixmap = QPixmap(QSize(int(size * ratio), int(size * ratio)))
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, size * ratio, size * ratio))
    painter.end()
    pixmap.setDevicePixelRatio(ratio)
    return pixmap


@functools.cache
def icon(name: str, color: str = "#6a7084") -> QIcon:
    """The icon ``name`` drawn in ``color``."""
    svg = _svg(name).replace("currentColor", color)
    result = QIcon()
    for size in SIZES:
        result.addPixmap(_render(svg, size))
    return result


@functools.cache
def icon_file(name: str, color: str) -> str:
    """A file of the icon ``name`` drawn in ``color``, for a style sheet's ``url()`` (which reads only files),
    in the user's cache folder; written once per colour.

    Raises:
        OSError: the cache folder cannot be written.
    """
    cache = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericCacheLocation)
    folder = Path(cache or Path.home() / ".cache") / "hearth" / "icons"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{color.lstrip('#')}.svg"
    svg = _svg(name).replace("currentColor", color)
    if not path.is_file() or path.read_text(encoding="utf-8") != svg:
        path.write_text(svg, encoding="utf-8")
    return path.as_posix()


@functools.cache
def app_icon() -> QIcon:
    """The application icon (full colour)."""
    svg = _svg("app")
    result = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256):
        result.addPixmap(_render(svg, size, ratio=1.0))
    return result
