"""Renders Hearth's application icon from its master, resources/icons/app.svg, for every platform.

    python packaging/icons.py        (or `make icons`)

writes, under resources/icons/:

- ``hicolor/NxN/apps/hearth.png`` for the sizes freedesktop desktops expect (16 to 512) and
  ``hicolor/scalable/apps/hearth.svg``: the Linux icon theme layout, copied as is by
  ``packaging/linux/desktop.py``;
- ``hearth.ico`` (16 to 256, the Windows executable's icon);
- ``hearth.icns`` (16 to 1024, the macOS app bundle's icon).

The outputs are committed, so building on macOS or Windows needs only PyInstaller. Qt renders
the SVG (the app draws its icon with the same renderer); Pillow writes the .ico and .icns.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ICONS = ROOT / "resources" / "icons"
MASTER = ICONS / "app.svg"
HICOLOR = ICONS / "hicolor"
PNG_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_SIZES = (16, 32, 64, 128, 256, 512, 1024)
NAME = "hearth"


def render_png(svg: Path, size: int) -> bytes:
    """The SVG drawn on a transparent ``size`` x ``size`` canvas, as PNG bytes."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    if QGuiApplication.instance() is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        render_png.app = QGuiApplication([])  # kept alive for later calls
    renderer = QSvgRenderer(QByteArray(svg.read_bytes()))
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data)


def hicolor_png(size: int) -> Path:
    return HICOLOR / f"{size}x{size}" / "apps" / f"{NAME}.png"


def build() -> list[Path]:
    """Write every icon file; the paths written."""
    from PIL import Image

    images = {
        size: Image.open(io.BytesIO(render_png(MASTER, size))).convert("RGBA") for size in (*PNG_SIZES, 1024)
    }
    written = []
    for size in PNG_SIZES:
        path = hicolor_png(size)
        path.parent.mkdir(parents=True, exist_ok=True)
        images[size].save(path, optimize=True)
        written.append(path)
    scalable = HICOLOR / "scalable" / "apps" / f"{NAME}.svg"
    scalable.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MASTER, scalable)
    written.append(scalable)
    # Each size drawn from the vector, not downscaled from one bitmap: small sizes stay crisp.
    ico = ICONS / f"{NAME}.ico"
    images[ICO_SIZES[-1]].save(
        ico,
        format="ICO",
        sizes=[(s, s) for s in ICO_SIZES],
        append_images=[images[s] for s in ICO_SIZES[:-1]],
    )
    icns = ICONS / f"{NAME}.icns"
    images[1024].save(icns, format="ICNS", append_images=[images[s] for s in ICNS_SIZES[:-1]])
    return [*written, ico, icns]


if __name__ == "__main__":
    for path in build():
        print(path.relative_to(ROOT))
    sys.exit(0)
