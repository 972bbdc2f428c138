"""Side by side in the chat store: the second model's column is a companion chat, hidden from the list,
holding a copy of the conversation shown; unsplit it becomes a chat of its own; deleted with its chat."""

from __future__ import annotations

from app.store import ChatSettings, ChatStore
from app.store.records import AnswerStats


def test_split_keeps_a_companion_with_the_conversation_and_the_second_model(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat = store.create_chat(ChatSettings(model="local", system_prompt="Be brief."))
        store.add_message(chat.id, "user", "Hello")
        store.add_message(chat.id, "assistant", "Hi!", AnswerStats(model="local", tokens=2))
        companion = store.start_split(chat.id, "remote/model")
        assert companion.split_of == chat.id and companion.settings.model == "remote/model"
        assert companion.settings.system_prompt == "Be brief."
        assert [(m.role, m.content) for m in store.messages(companion.id)] == [("user", "Hello"), ("assistant", "Hi!")]
        assert [c.id for c in store.list_chats()] == [chat.id]  # one chat in the list
        assert store.split_companion(chat.id).id == companion.id
        store.close()
        store = ChatStore(tmp_path)  # kept across a restart
        assert store.split_companion(chat.id).id == companion.id

        # unsplit: the column's conversation stays, as a chat of its own
        store.end_split(chat.id)
        assert store.split_companion(chat.id) is None
        assert sorted(c.id for c in store.list_chats()) == sorted([chat.id, companion.id])

        # a chat deleted takes its column with it
        again = store.start_split(chat.id, "other")
        store.delete_chat(chat.id)
        assert store.get_chat(again.id) is None and store.messages(again.id) == []
        assert store.get_chat(companion.id) is not None  # the earlier, unsplit one is a chat of its own
    finally:
        store.close()
