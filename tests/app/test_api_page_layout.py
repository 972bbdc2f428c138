"""The Local API page stays put under the pointer: switching sharing on leaves Apply where it was, and the
wheel over an example box scrolls the page (the box scrolls itself only once clicked into)."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QScrollArea


def wheel_down(widget) -> None:
    """One notch of the mouse wheel over the middle of ``widget``, as Qt delivers it (to the box's viewport)."""
    target = widget.viewport() if hasattr(widget, "viewport") else widget
    local = QPointF(target.rect().center())
    event = QWheelEvent(
        local, QPointF(target.mapToGlobal(local.toPoint())), QPoint(0, 0), QPoint(0, -120),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False,
    )  # fmt: skip
    QApplication.sendEvent(target, event)


def test_switching_sharing_on_leaves_apply_under_the_pointer(qtbot, window):
    from app.pages.api_page import ApiPage

    # a page of its own, at a size of its own (the window is shared: other tests resize it and set keys), showing
    # the settings as a user sees them first: no key, not shared
    page = ApiPage(window.api, window.engine, window.settings_store, window.theme.colors)
    qtbot.addWidget(page)
    page.load(replace(page.settings, expose_api=False, api_key=""))
    page.resize(1000, 700)
    page.show()
    qtbot.waitExposed(page)
    qtbot.wait(50)
    assert not page.expose.isChecked() and not page.key.text()
    before = page.apply_button.mapTo(page, QPoint(0, 0))

    qtbot.mouseClick(page.expose, Qt.MouseButton.LeftButton)
    qtbot.wait(50)  # the layout settles

    # the warning ("Without a key, any app on this computer...") came, and Apply did not move for it
    assert page.expose.isChecked() and page.warning.isVisible()
    assert page.apply_button.isEnabled()
    assert page.apply_button.mapTo(page, QPoint(0, 0)) == before


def test_the_wheel_over_an_example_scrolls_the_page_until_the_box_is_clicked(qtbot, window):
    page = window.api_page
    window.nav.select(3)
    window.resize(1000, 600)  # shorter than the page: it scrolls
    qtbot.waitExposed(page)
    scroll = page.findChild(QScrollArea)
    bar = scroll.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=5_000)
    bar.setValue(bar.maximum() // 3)
    _title, box, _copy = page.dialects[0]
    scroll.ensureWidgetVisible(box)
    box.setPlainText("\n".join(f"line {i}" for i in range(40)))  # a box that could scroll itself
    start = bar.value()

    wheel_down(box)
    assert bar.value() > start and box.verticalScrollBar().value() == 0

    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=2_000)
    start = bar.value()
    wheel_down(box)
    assert box.verticalScrollBar().value() > 0 and bar.value() == start
    page.load(page.settings)


def test_the_status_line_says_why_an_applied_restart_failed(qtbot, idle_window, monkeypatch):
    from app.net.engine import EngineState

    page, engine = idle_window.api_page, idle_window.engine
    monkeypatch.setattr(engine, "apply", lambda config: None)  # the restart itself is the engine's
    page.port.setValue(8799)
    page.apply_button.click()
    assert page.status.text().startswith("Restarting the engine")

    engine._set_state(EngineState("starting", "Starting the engine…"))
    assert page.status.text().startswith("Restarting the engine")
    engine._set_state(EngineState("failed", "Port 8799 is in use by another program; choose another port and try again.\nlast words"))
    assert page.status.text() == (
        "The engine did not start with these settings: Port 8799 is in use by another program; choose another port and try again."
    )
    assert not page.apply_button.isEnabled()  # until the port (or another field) is changed
    page.port.setValue(8800)
    assert page.apply_button.isEnabled() and page.status.text() == "Apply restarts the engine with these settings."

    page.apply_button.click()
    engine._set_state(EngineState("ready", "The engine is ready.", "http://127.0.0.1:8800"))
    assert page.status.text() == "Not shared: only this app uses the engine."
