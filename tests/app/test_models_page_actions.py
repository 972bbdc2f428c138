"""The Models page's actions on the selected model, and its status line, without a worker: the buttons follow
the selection, a message does not move the page, and each tab shows its own message."""

from __future__ import annotations

from app.net.types import ModelInfo


def _page(idle_window):
    idle_window.nav.select(1)
    page = idle_window.models_page
    page.models.changed.emit([ModelInfo(name="loaded-one", state="loaded"), ModelInfo(name="on-disk")])
    return page


def _enabled(page) -> dict[str, bool]:
    buttons = {"load": page.load_button, "settings": page.settings_button, "unload": page.unload_button,
               "delete": page.delete_button}  # fmt: skip
    return {name: b.isEnabled() for name, b in buttons.items()}


def test_the_buttons_wait_for_a_selection_and_follow_its_state(idle_window):
    page = _page(idle_window)
    assert _enabled(page) == {"load": False, "settings": False, "unload": False, "delete": False}

    page.view.selectRow(1)
    assert _enabled(page) == {"load": True, "settings": True, "unload": False, "delete": True}
    page.view.selectRow(0)
    assert _enabled(page) == {"load": False, "settings": True, "unload": True, "delete": True}

    page.models.changed.emit([ModelInfo(name="loaded-one"), ModelInfo(name="on-disk")])  # unloaded meanwhile
    assert page.selected().name == "loaded-one"  # still selected after the list came again
    assert _enabled(page) == {"load": True, "settings": True, "unload": False, "delete": True}


def test_a_message_does_not_move_the_tabs_and_goes_when_another_model_is_selected(qtbot, idle_window):
    page = _page(idle_window)
    qtbot.waitUntil(lambda: page.tabs.isVisible())
    top = page.tabs.geometry().top()
    page.view.selectRow(0)
    page.show_message("loaded-one is unloaded; its memory is free.")
    page.layout().activate()
    assert page.tabs.geometry().top() == top
    assert "unloaded" in page.message.text()

    page.view.selectRow(1)
    assert page.message.text() == ""


def test_each_tab_shows_its_own_message(idle_window):
    page = _page(idle_window)
    hub_down = "Could not reach the model hub at huggingface.co; check your internet connection and try again."
    page.hub.message.emit(hub_down, True)
    assert page.message.text() == ""  # said on Discover, not on the models of this computer
    page.tabs.setCurrentWidget(page.hub)
    assert "Could not reach the model hub" in page.message.text()
    for other in (page.downloads, page.remote, page.local_tab):
        page.tabs.setCurrentWidget(other)
        assert page.message.text() == ""
    page.tabs.setCurrentWidget(page.hub)
    assert "Could not reach the model hub" in page.message.text()


def _shows_color(button, color: str) -> bool:
    from PySide6.QtGui import QColor

    image = button.grab().toImage()
    wanted = QColor(color).rgb()
    return any(image.pixel(x, y) == wanted for x in range(image.width()) for y in range(image.height()))


def test_delete_looks_disabled_while_it_is(qtbot, idle_window):
    page = _page(idle_window)
    qtbot.waitUntil(lambda: page.delete_button.isVisible())
    error = idle_window.theme.colors.error_text
    assert not page.delete_button.isEnabled() and not _shows_color(page.delete_button, error)
    page.view.selectRow(0)
    assert page.delete_button.isEnabled() and _shows_color(page.delete_button, error)


def test_the_model_folders_count_again_when_a_download_arrives(idle_window, monkeypatch):
    page = _page(idle_window)
    asked = []
    monkeypatch.setattr(page.folders, "refresh", lambda: asked.append("folders"))
    monkeypatch.setattr(page.models, "refresh", lambda: asked.append("models"))
    page.downloads.model_arrived.emit("TheOrg/Tiny-Llama-GGUF:Q2_K")
    assert asked == ["models", "folders"]  # not "0 models" beside the folder the download went to


def test_delete_asks_whether_the_files_go_as_the_worker_says_and_as_before_where_it_does_not(qtbot, idle_window):
    from PySide6.QtWidgets import QMessageBox

    from app.net.types import ModelInfo

    page = _page(idle_window)
    for fields, question in [
        ({"source": "hub", "deletes_files": False}, "Remove x from Hearth? Its files (/m/x.gguf) stay where they are."),
        ({"source": "import", "deletes_files": True}, "Delete x? Its files (/m/x.gguf) are removed from this computer."),
        ({"source": "hub"}, "Delete x? Its files (/m/x.gguf) are removed from this computer."),  # a worker that does not say
        ({"source": "import"}, "Remove x from Hearth? Its files (/m/x.gguf) stay where they are."),
        ({"origin": "folder", "origin_label": "Model folder"},
         "Remove x from Hearth? Its file (/m/x.gguf) is in one of your model folders and stays there."),
        ({"origin": "ollama", "origin_label": "Ollama"}, "Remove x from Hearth? Its files belong to Ollama and stay where they are."),
    ]:
        page.confirm_delete(ModelInfo(name="x", path="/m/x.gguf", **fields))
        box = next(w for w in page.findChildren(QMessageBox) if w.isVisible())
        assert box.text() == question, fields
        box.button(QMessageBox.StandardButton.Cancel).click()
        qtbot.waitUntil(lambda b=box: not b.isVisible())


def test_the_unload_sentence_says_whether_the_memory_was_freed():
    """As the worker answers: a name whose weights another loaded name answers from frees no memory."""
    from app.pages.models_page import unloaded_sentence
    from engine.server.api_models import UnloadAnswer

    def said(**answer) -> str:
        return unloaded_sentence("base", UnloadAnswer(name="base", state="not-loaded", **answer))

    assert said(unloaded=True) == "base is unloaded; its memory is free."
    assert said(unloaded=True, weights_kept_for=["pirate"]) == (
        "base is unloaded; its weights stay loaded for pirate, which answers from them too."
    )
    assert said(unloaded=True, weights_kept_for=["a", "b"]).endswith("for a, b, which answer from them too.")
    assert said(unloaded=False) == "base was not loaded."
