"""Documents in the app: add a folder from the Docs panel, attach it to a chat, ask, see the sources with
their scores, and open one at its page; the attachment and the sources are still there when the chat is
opened again and after a restart. A real window offscreen and a real worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.helpers import fresh_chat
from tests.engine.documents.conftest import PDF_PAGES, write_pdf

pytestmark = pytest.mark.slow


def test_attach_ask_sources_and_open_a_citation(qtbot, window, tmp_path: Path):
    from PySide6.QtCore import Qt

    folder = tmp_path / "home-docs"
    folder.mkdir()
    write_pdf(folder / "manual.pdf", PDF_PAGES)
    (folder / "bees.md").write_text("# Bees\n\nThe hive is inspected every nine days.\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really")

    fresh_chat(window, max_tokens=16)  # the session's window holds other tests' chats, settings and all
    ui = window.docs
    opened = []
    ui.open_url = opened.append
    ui.button.setChecked(True)
    assert ui.panel.isVisible()

    ui.add_folder(folder, "home-docs")
    panel = ui.panel

    def indexed():
        return any(c.name == "home-docs" and c.phase == "done" for c in ui.collections)

    qtbot.waitUntil(indexed, timeout=240_000)
    item = panel.collections.item(0)
    assert item.text().startswith("home-docs — 2 files")
    assert "1 failed" in item.text() and "broken.pdf" in item.toolTip()
    # a folder added from a chat is attached to it (once the add's answer is in: a poll of the collections can
    # show the small folder indexed before it, on a busy machine)
    qtbot.waitUntil(lambda: panel.collections.item(0).checkState() == Qt.CheckState.Checked, timeout=240_000)
    assert ui.button.text() == "Docs (1)"

    chat_id = window.chats.chat_id
    with qtbot.waitSignal(window.controller.answer_finished, timeout=240_000) as finished:
        window.chats.composer.send_requested.emit("How do I reset the thermostat?")
    outcome = finished.args[0]
    assert outcome.chat_id == chat_id and outcome.error is None
    [_question, answer] = window.store.messages(chat_id)
    assert window.store.steps(answer.id).added == ["Documents: home-docs"]  # the request named the collection

    labels = [panel.sources.item(i).text() for i in range(panel.sources.count())]
    assert any(label.startswith("[") and "manual.pdf, page 2" in label for label in labels), labels
    row = next(i for i, label in enumerate(labels) if "manual.pdf, page 2" in label)
    panel.sources.itemActivated.emit(panel.sources.item(row))
    assert len(opened) == 1
    assert opened[0].toString().endswith("manual.pdf#page=2") and opened[0].isLocalFile()

    [_question, answer] = window.store.messages(chat_id)
    assert [s.label for s in answer.sources] == [label.split("  (")[0] for label in labels]

    # another chat and back: the attachment and the last answer's sources come back with it
    window.chats.new_chat()
    assert window.chats.chat_id != chat_id
    assert ui.button.text() == "Docs" and panel.sources.count() == 0
    window.chats.sidebar.chat_selected.emit(chat_id)
    assert ui.button.text() == "Docs (1)"
    assert [panel.sources.item(i).text() for i in range(panel.sources.count())] == labels

    # a restart: a new store and window on the same data folder
    from app.store import ChatStore
    from tests.app.conftest import open_window

    ui.button.setChecked(False)
    store = ChatStore(window.store.path.parent)
    try:
        again = open_window(qtbot, store, window.engine, window.theme)
        again.chats.sidebar.chat_selected.emit(chat_id)
        ui2, panel2 = again.docs, again.docs.panel
        assert ui2.button.text() == "Docs (1)"
        assert [panel2.sources.item(i).text() for i in range(panel2.sources.count())] == labels
        ui2.button.setChecked(True)
        qtbot.waitUntil(lambda: panel2.collections.count() == 1, timeout=30_000)
        assert panel2.collections.item(0).checkState() == Qt.CheckState.Checked
        exported = tmp_path / "chat.json"
        again.chats.write_export(chat_id, exported, "json")
        data = json.loads(exported.read_text())
        assert data["collections"] == ["home-docs"]
        assert any("manual.pdf, page 2" in s["label"] and s["uri"].endswith("#page=2") for s in data["messages"][1]["sources"])

        # unchecking detaches, for good: the next question goes to the model without sources
        panel2.collections.item(0).setCheckState(Qt.CheckState.Unchecked)
        assert ui2.button.text() == "Docs"
        assert store.get_chat(chat_id).collections == ()
        ui2.button.setChecked(False)
        again.close()
    finally:
        store.close()
