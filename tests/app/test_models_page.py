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
    assert page.facts.hardware.ram_total > 0 and page.facts.hardware.cpu.model
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
    assert box.text() == f"Remove {name} from Hearth? Its files ({copy}) stay where they are."  # an import's: kept
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: name not in table_rows(page), timeout=30_000)
    assert copy.exists() and f"Removed {name}; its files at {copy} were left in place." in page.message.text()


def test_an_ollama_model_has_its_badge_and_removing_it_keeps_its_files(qtbot, window, starter_path, tmp_path):
    from PySide6.QtWidgets import QMessageBox

    from app.widgets.local_models_table import BADGE_ROLE, OriginBadgeDelegate
    from engine.catalog.other_apps import OtherAppRoots, scan_other_apps
    from engine.catalog.other_apps_sync import register_found
    from engine.catalog.registry import ModelRegistry
    from tests.engine.catalog.other_apps_fixtures import ollama_store

    store = tmp_path / "ollama"
    ollama_store(store, starter_path, parts=("registry.ollama.ai", "library", "badge-test", "1b"))
    (found,) = scan_other_apps(OtherAppRoots(ollama=(store,)))
    registry = ModelRegistry(register_starter=False)  # the worker's registry (this session's HEARTH_HOME)
    register_found(registry, found)
    registry.close()
    window.nav.select(1)
    page = window.models_page
    page.engine_ready()
    qtbot.waitUntil(lambda: "badge-test:1b" in table_rows(page), timeout=10_000)
    row = list(table_rows(page)).index("badge-test:1b")
    assert page.table.index(row, 0).data(BADGE_ROLE) == "Ollama"
    assert page.table.index(0 if row else 1, 0).data(BADGE_ROLE) is None  # Hearth's own models have none
    assert isinstance(page.view.itemDelegateForColumn(0), OriginBadgeDelegate)
    assert not page.view.viewport().grab().isNull()  # the badge paints

    page.view.selectRow(row)
    page.delete_button.click()
    box = next(w for w in page.findChildren(QMessageBox) if w.isVisible())
    assert "belong to Ollama" in box.text()
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: "badge-test:1b" not in table_rows(page), timeout=30_000)
    assert found.path.is_file()
    assert "belong to Ollama and were left in place" in page.message.text()  # the worker's own sentence
