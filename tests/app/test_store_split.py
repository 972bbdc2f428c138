"""Side by side in the chat store: the second model's column is a companion chat, hidden from the list,
holding a copy of the conversation shown; unsplit it becomes a chat of its own (named after its model, below
the chat) when it was sent a message, and goes when it was not; deleted with its chat."""

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

        # unsplit after a message: the column's conversation stays, as a chat of its own
        store.add_message(chat.id, "user", "And you?")
        store.add_message(companion.id, "user", "And you?")
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


def test_a_column_sent_no_message_goes_and_one_sent_a_message_is_named_after_its_model(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat = store.create_chat(ChatSettings(model="local"))
        store.add_message(chat.id, "user", "Hello")
        store.add_message(chat.id, "assistant", "Hi!", AnswerStats(model="local"))
        unused = store.start_split(chat.id, "local")
        assert store.end_split(chat.id) is None  # opened and closed: no copy is left behind
        assert [c.id for c in store.list_chats()] == [chat.id]
        assert store.get_chat(unused.id) is None and store.messages(unused.id) == []

        used = store.start_split(chat.id, "other")
        store.add_message(chat.id, "user", "Again")
        store.add_message(used.id, "user", "Again")  # the column is sent the message after the chat
        store.add_message(used.id, "assistant", "Sure", AnswerStats(model="other"))
        kept = store.end_split(chat.id)
        assert kept is not None and kept.id == used.id and kept.split_of is None
        assert kept.title == "other: Hello"
        assert [c.id for c in store.list_chats()] == [chat.id, used.id]  # the chat still opens first at launch
    finally:
        store.close()


def test_a_column_of_an_empty_chat_is_kept_once_it_was_sent_a_message(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat = store.create_chat(ChatSettings(model="local"))
        companion = store.start_split(chat.id, "other")
        store.add_message(companion.id, "user", "Hello")
        assert store.end_split(chat.id).id == companion.id
    finally:
        store.close()
