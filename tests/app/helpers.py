"""Driving the chat page the way a person does: type, click, wait for the answer."""

from __future__ import annotations

from app.chat.answer_run import AnswerOutcome
from app.main_window import MainWindow
from app.store.records import ChatSettings
from tests.app.conftest import ANSWER_TIMEOUT_MS


def fresh_chat(window: MainWindow, *, max_tokens: int = 24, temperature: float = 0.0) -> int:
    """A new, empty chat with short, greedy answers (the tests share two CPU cores; greedy: what they read is the same every run).

    Always a chat of its own: "New chat" keeps an empty current chat as it is, and the session's window may
    have one that an earlier test gave a thinking switch, tools or documents.
    """
    page = window.chats
    page.new_chat()  # the model a new chat gets
    model = window.store.get_chat(page.chat_id).settings.model
    chat = window.store.create_chat(ChatSettings(model=model))
    page.open_chat(chat.id)
    page.refresh_list()
    page.settings_panel.max_tokens.setValue(max_tokens)
    page.settings_panel.temperature.setValue(temperature)
    page.settings_panel.apply_now()
    return page.chat_id


def type_and_send(qtbot, window: MainWindow, text: str) -> None:
    composer = window.chats.composer
    qtbot.waitUntil(lambda: composer.engine_ready, timeout=ANSWER_TIMEOUT_MS)
    composer.input.setPlainText(text)
    assert composer.button.isEnabled()
    composer.button.click()


def send_and_wait(qtbot, window: MainWindow, text: str) -> AnswerOutcome:
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS) as blocker:
        type_and_send(qtbot, window, text)
    return blocker.args[0]


def bubbles(window: MainWindow):
    return window.chats.view.bubbles
