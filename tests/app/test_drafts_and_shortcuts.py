"""Each chat keeps its own unsent draft, and the chat page answers its keyboard shortcuts. No worker: nothing is
answered here."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest


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


def test_ctrl_n_opens_a_new_chat_and_ctrl_f_goes_to_the_search_box(qtbot, idle_window, chat_store):
    page = idle_window.chats
    chat = chat_store.create_chat()
    chat_store.add_message(chat.id, "user", "Hello")
    page.refresh_list()
    page.open_chat(chat.id)
    idle_window.activateWindow()
    qtbot.waitActive(idle_window)
    page.composer.input.setFocus()
    QTest.keyClick(page.composer.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert page.chat_id != chat.id and chat_store.get_chat(page.chat_id).title == "New chat"
    assert "Ctrl+N" in page.sidebar.new_button.toolTip()
    page.sidebar.search.setText("hel")
    QTest.keyClick(page.composer.input, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert page.sidebar.search.hasFocus() and page.sidebar.search.selectedText() == "hel"
    assert "Ctrl+F" in page.sidebar.search.toolTip()


def test_esc_stops_the_answer_in_progress(qtbot, idle_window, monkeypatch):
    page = idle_window.chats
    stopped = []
    monkeypatch.setattr(page.controller, "stop", stopped.append)
    idle_window.activateWindow()
    qtbot.waitActive(idle_window)
    page.composer.input.setFocus()
    QTest.keyClick(page.composer.input, Qt.Key.Key_Escape)
    assert stopped == []  # nothing to stop
    page.composer.set_answering(True)  # as while the chat answers
    QTest.keyClick(page.composer.input, Qt.Key.Key_Escape)
    assert stopped == [page.chat_id]
    assert "Esc" in page.composer.button.toolTip()
