"""Details of the style sheet a user sees: the model picker has its drop-down arrow, and dark mode draws no
bright line beside the Models page's tabs."""

from __future__ import annotations

from PySide6.QtGui import QColor


def pixels(widget, x0: int, x1: int, y0: int, y1: int) -> list[QColor]:
    image = widget.grab().toImage()
    ratio = image.devicePixelRatio()
    return [
        image.pixelColor(int(x * ratio), int(y * ratio))
        for x in range(max(x0, 0), min(x1, widget.width()))
        for y in range(max(y0, 0), min(y1, widget.height()))
    ]


def test_the_model_picker_shows_its_drop_down_arrow(qtbot, window, theme):
    combo = window.chats.model_combo
    qtbot.waitUntil(lambda: combo.count() > 0, timeout=10_000)
    surface = QColor(theme.colors.surface)
    # the arrow's strokes at the right end of the box: pixels that stand out from the box's background
    arrow = pixels(combo, combo.width() - 24, combo.width() - 4, 4, combo.height() - 4)
    near = [p for p in arrow if surface.lightness() - p.lightness() > 40]
    assert len(near) >= 6


def test_dark_mode_draws_no_bright_line_beside_the_models_tabs(qtbot, window):
    before = window.settings_store.load().theme
    window.choose_theme("dark")
    try:
        window.nav.select(1)
        tabs = window.models_page.tabs
        bar = tabs.tabBar()
        qtbot.waitExposed(tabs)
        last = bar.tabRect(bar.count() - 1).translated(bar.pos())
        # right of the last tab, along the tabs' height: no tab there, only the page's dark background
        beside = pixels(tabs, last.right() + 4, tabs.width(), last.top(), last.bottom() + 2)
        assert beside and max(p.lightness() for p in beside) < 100
    finally:
        window.choose_theme(before)
