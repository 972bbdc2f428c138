"""Side by side on the Chats page: closing it leaves no copy of the chat behind unless the second column was
sent a message; then that column stays as a chat named after its model, and the chat itself opens at launch."""

from __future__ import annotations

from app.pages.chats_page import ChatsPage
from app.store.records import AnswerStats, ChatSettings


def _chat_with_an_answer(window) -> int:
    store = window.store
    chat = store.create_chat(ChatSettings(model="smollm2-135m-instruct"))
    store.add_message(chat.id, "user", "Give me a table of fruits")
    store.add_message(chat.id, "assistant", "| Fruit |", AnswerStats(model="smollm2-135m-instruct"))
    page = window.chats
    page.refresh_list()
    page.open_chat(chat.id)
    return chat.id


def _titles(page: ChatsPage) -> list[str]:
    return [page.list_model.chat(row).title for row in range(page.list_model.rowCount())]


def test_closing_side_by_side_unused_leaves_only_the_chat(idle_window):
    page = idle_window.chats
    chat_id = _chat_with_an_answer(idle_window)
    before = _titles(page)

    page.split_button.click()  # the only model there is: the same one
    companion = page.split_chat_id
    assert companion is not None and page.split_column.isVisible()
    page.split_button.click()

    assert page.split_chat_id is None and not page.split_column.isVisible()
    assert _titles(page) == before
    assert idle_window.store.get_chat(companion) is None
    assert page.chat_id == chat_id


def test_a_used_second_column_stays_named_after_its_model_and_the_chat_opens_at_launch(idle_window):
    page = idle_window.chats
    chat_id = _chat_with_an_answer(idle_window)
    page.split_button.click()
    companion = page.split_chat_id
    idle_window.store.add_message(chat_id, "user", "Now vegetables")
    idle_window.store.add_message(companion, "user", "Now vegetables")  # what sending while split does
    page.split_button.click()

    titles = _titles(page)
    assert titles[:2] == ["Give me a table of fruits", "smollm2-135m-instruct: Give me a table of fruits"]
    assert page.chat_id == chat_id

    again = ChatsPage(idle_window.controller, idle_window.models, idle_window.theme.colors)  # the next launch
    try:
        assert again.chat_id == chat_id
    finally:
        again.deleteLater()
