"""The window opens within the screen's room: on a screen smaller than its usual first size (1280 x 820), it
opened wider and taller than the screen, its right side and bottom out of reach."""

from __future__ import annotations


def test_the_window_opens_within_the_screen(idle_window):
    from app.main_window import FRAME, MainWindow

    room = idle_window.screen().availableGeometry()  # offscreen: 800 x 600, below the usual first size
    assert room.width() < MainWindow.SIZE[0] or room.height() < MainWindow.SIZE[1]
    assert idle_window.width() <= room.width() - FRAME[0] and idle_window.height() <= room.height() - FRAME[1]
    assert idle_window.minimumWidth() <= idle_window.width() and idle_window.minimumHeight() <= idle_window.height()
    assert room.contains(idle_window.geometry().topLeft())
