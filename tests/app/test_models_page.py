"""The Models and Hardware pages against the worker's admin API."""

from __future__ import annotations

import shutil

from app.units import human_bytes
from engine.starter import STARTER_NAME


def table_rows(page):
    table = page.table
    return {
        table.index(r, 0).data(): [table.index(r, c).data() for c in range(table.columnCount())]
        for r in range(table.rowCount())
    }


def test_local_models_show_size_format_quantization_and_backend(qtbot, window, starter_path):
    window.nav.select(1)
    page = window.models_page
    page.engine_ready()
    qtbot.waitUntil(lambda: STARTER_NAME in table_rows(page) and table_rows(page)[STARTER_NAME][5] != "—", timeout=10_000)
    _name, fmt, quant, size, _params, backend, state = table_rows(page)[STARTER_NAME]
    assert (fmt, quant, backend) == ("GGUF", "Q4_1", "llamacpp")
    assert size == human_bytes(starter_path.stat().st_size)
    assert state in ("Loaded", "On disk")


def test_an_endpoint_the_worker_lacks_is_a_sentence_not_a_crash(qtbot, window):
    call = window.api.get("/api/no-such-endpoint")
    with qtbot.waitSignal(call.failed, timeout=10_000) as blocker:
        pass
    error = blocker.args[0]
    assert error.status == 404 and error.missing_endpoint
    assert error.message.startswith("This engine does not offer GET /api/no-such-endpoint")


def test_hardware_page_shows_facts_backends_and_a_memory_bar(qtbot, window):
    window.nav.select(2)
    page = window.hardware
    page.refresh()
    qtbot.waitUntil(lambda: page.facts is not None, timeout=10_000)
    assert page.facts.ram_total > 0 and page.facts.cpu
    assert {b.format for b in page.facts.backends} >= {"gguf"}
    qtbot.waitUntil(lambda: page.model_combo.count() > 0, timeout=10_000)
    page.model_combo.setCurrentIndex(page.model_combo.findData(STARTER_NAME))
    assert page.ram_bar.need is not None and page.ram_bar.fits
    assert "Weights" in page.bar_legend.text()


def test_importing_a_gguf_by_drop_adds_it_and_delete_removes_it(qtbot, window, starter_path, tmp_path):
    from PySide6.QtCore import QMimeData, QPoint, Qt, QUrl
    from PySide6.QtGui import QDropEvent
    from PySide6.QtWidgets import QMessageBox

    copy = tmp_path / "my-imported-model.gguf"
    shutil.copyfile(starter_path, copy)
    window.nav.select(1)
    page = window.models_page
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(copy))])
    drop = QDropEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    page.dropEvent(drop)
    qtbot.waitUntil(lambda: any("my-imported-model" in n for n in table_rows(page)), timeout=30_000)

    name = next(n for n in table_rows(page) if "my-imported-model" in n)
    row = list(table_rows(page)).index(name)
    page.view.selectRow(row)
    page.delete_button.click()
    box = next(w for w in page.findChildren(QMessageBox) if w.isVisible())
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: name not in table_rows(page), timeout=30_000)
