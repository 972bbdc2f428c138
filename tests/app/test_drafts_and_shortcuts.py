"""Each chat keeps its own unsent draft, and the chat page answers its keyboard shortcuts. No worker: nothing is
answered here."""

from __future__ import annotations


def _type(page, text: str) -> None:
    page.composer.input.setPlainText(text)


def test_each_chat_keeps_its_own_draft(idle_window, chat_store):
    page = idle_window.chats
    first, second = chat_store.create_chat(), chat_store.create_chat()
    chat_store.add_message(second.id, "user", "Hello")  # not empty: "New chat" does not reuse it
    page.refresh_list()
    page.open_chat(first.id)
    _type(page, "a draft for the first chat")
    page.open_chat(second.id)
    assert page.composer.input.toPlainText() == ""  # the first chat's draft stays there
    _type(page, "and one for the second")
    page.open_chat(first.id)
    assert page.composer.input.toPlainText() == "a draft for the first chat"
    page.open_chat(second.id)
    assert page.composer.input.toPlainText() == "and one for the second"
    page.new_chat()
    assert page.chat_id not in (first.id, second.id) and page.composer.input.toPlainText() == ""
    page.open_chat(first.id)
    assert page.composer.input.toPlainText() == "a draft for the first chat"
