"""A chat's lifecycle goes through the chat controller: create, fork, split, rename and delete, each saying
so by one signal (a copy of a chat by ``chat_copied``, whatever made it). The chat's settings, its MCP
servers among them, go with each copy and with the chat when it is deleted."""

from __future__ import annotations

from app.chat.controller import ChatController
from app.store import AnswerStats, ChatSettings, ChatStore


def test_the_controller_creates_copies_renames_and_deletes_chats(qapp, tmp_path):
    store = ChatStore(tmp_path)
    try:
        controller = ChatController(store, api=None)  # no answers here: nothing is asked of the worker
        copied, deleted, changes = [], [], []
        controller.chat_copied.connect(lambda chat_id, copy_id: copied.append((chat_id, copy_id)))
        controller.chat_deleted.connect(deleted.append)
        controller.chats_changed.connect(lambda: changes.append(True))
        settings = ChatSettings(model="local", system_prompt="Be brief.", thinking=False, mcp_servers=("files", "web"))
        chat = controller.create_chat(settings)
        assert [c.id for c in controller.chats()] == [chat.id] and changes
        store.add_message(chat.id, "user", "Hello")
        answer = store.add_message(chat.id, "assistant", "Hi!", AnswerStats(model="local", tokens=2))

        fork = controller.fork(chat.id, answer.id)
        companion = controller.start_split(chat.id, "other")
        assert copied == [(chat.id, fork.id), (chat.id, companion.id)]
        assert fork.settings == chat.settings  # its MCP servers too
        assert companion.settings.mcp_servers == ("files", "web") and companion.settings.thinking is False
        assert controller.split_companion(chat.id).id == companion.id

        assert controller.rename(chat.id, "  Greetings ").title == "Greetings"
        assert controller.chat(chat.id).title == "Greetings"

        controller.delete(chat.id)
        assert deleted == [chat.id]
        assert controller.chat(chat.id) is None and controller.chat(companion.id) is None  # its column went too
        assert [c.id for c in controller.chats()] == [fork.id]
    finally:
        store.close()
