"""Driving the chat page the way a person does: type, click, wait for the answer."""

from __future__ import annotations

from app.chat.answer_run import AnswerOutcome
from app.main_window import MainWindow
from tests.app.conftest import ANSWER_TIMEOUT_MS


def fresh_chat(window: MainWindow, *, max_tokens: int = 24, temperature: float = 0.0) -> int:
    """A new, empty chat with short, greedy answers (the tests share two CPU cores; greedy: what they read is the same every run)."""
    page = window.chats
    page.new_chat()
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
