"""The Docs panel and the Tools dialog say what to do when they have nothing yet, and offer an action that
needs a selection only once something is selected."""

from __future__ import annotations

from pathlib import Path

from app.agent.servers_dialog import McpServersDialog
from app.agent.service import AgentService
from app.features.documents import DocCollection
from engine.agent import McpServerConfig
from tests.app.helpers import fresh_chat


def collection(name: str, phase: str | None) -> DocCollection:
    return DocCollection(name, files=3, chunks=12, embedded=12, failed=(), phase=phase, paused=False)


def test_the_docs_panel_says_to_add_a_folder_and_pauses_only_a_collection_being_indexed(qtbot, window):
    fresh_chat(window)
    panel = window.docs.panel
    window.docs.button.setChecked(True)
    panel.show_collections([], set())  # a first run: no collections yet
    assert panel.empty.isVisible() and "Add a folder" in panel.empty.text()
    assert panel.add_button.isEnabled()
    assert not panel.pause_button.isEnabled() and not panel.cancel_button.isEnabled()

    panel.show_collections([collection("recipes", "done"), collection("manuals", "embedding")], set())
    assert not panel.empty.isVisible()
    # nothing selected: they would act on the first, which is done
    assert not panel.pause_button.isEnabled()
    panel.collections.setCurrentRow(1)  # the one being indexed
    assert panel.pause_button.isEnabled() and panel.cancel_button.isEnabled()
    panel.collections.setCurrentRow(0)
    assert not panel.pause_button.isEnabled() and not panel.cancel_button.isEnabled()
    window.docs.button.setChecked(False)


def test_the_tools_dialog_says_to_add_a_server_and_removes_only_a_selected_one(qtbot, window, tmp_path: Path):
    chat_id = fresh_chat(window)
    agent = AgentService(tmp_path)  # a data folder with no MCP servers saved
    try:
        dialog = McpServersDialog(agent, chat_id, window.tools)
        qtbot.addWidget(dialog)
        dialog.show()
        assert dialog.empty.isVisible() and "Add an MCP server" in dialog.empty.text()
        assert dialog.add_button.isEnabled() and dialog.import_button.isEnabled()
        assert not dialog.tools_button.isEnabled() and not dialog.remove_button.isEnabled()
        assert not dialog.revoke_button.isEnabled()

        dialog.save(McpServerConfig(name="files", command="true"))
        assert not dialog.empty.isVisible() and dialog.server_names() == ["files"]
        assert not dialog.remove_button.isEnabled()  # listed, not selected yet
        dialog.servers.setCurrentRow(0)
        assert dialog.tools_button.isEnabled() and dialog.remove_button.isEnabled()
        dialog.remove_selected()
        assert dialog.empty.isVisible() and not dialog.remove_button.isEnabled()
    finally:
        agent.close()
