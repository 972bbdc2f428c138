"""The application icon in every size and format the three desktops expect, drawn from app.svg."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from tests.packaging.helpers import ICONS, load_script

icons = load_script("icons.py")


@pytest.mark.parametrize("size", icons.PNG_SIZES)
def test_each_freedesktop_size_is_the_icon_at_that_size(size):
    image = Image.open(ICONS / "hicolor" / f"{size}x{size}" / "apps" / "hearth.png")
    assert image.size == (size, size) and image.mode == "RGBA"
    assert image.getpixel((0, 0))[3] == 0  # transparent corner (the rounded square)
    assert image.getpixel((size // 2, size // 2))[3] == 255  # the flame, opaque


def test_the_committed_icons_are_what_the_master_renders_to(
    qapp,
):  # qapp: a QApplication, not the script's own
    for size in (16, 48, 256):
        fresh = Image.open(io.BytesIO(icons.render_png(icons.MASTER, size))).convert("RGBA")
        committed = Image.open(icons.hicolor_png(size)).convert("RGBA")
        differing = sum(
            1
            for a, b in zip(fresh.getdata(), committed.getdata(), strict=True)
            if max(abs(x - y) for x, y in zip(a, b, strict=True)) > 8
        )
        assert differing <= size * size // 100, f"{size}px: regenerate the icons with `make icons`"


def test_the_windows_icon_holds_every_size_up_to_256():
    ico = Image.open(ICONS / "hearth.ico")
    assert set(icons.ICO_SIZES) <= {w for w, _h in ico.ico.sizes()}


def test_the_macos_icon_holds_retina_sizes_up_to_1024():
    icns = Image.open(ICONS / "hearth.icns")
    sizes = icns.info["sizes"]
    assert (512, 512, 2) in sizes and (16, 16, 2) in sizes and (128, 128, 1) in sizes
    icns.load()
    assert icns.size == (1024, 1024)  # 512x512@2x, the largest a Retina Dock shows
    assert icns.getpixel((512, 512))[3] == 255
