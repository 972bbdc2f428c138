"""The worker dies mid-answer: the answer is kept, a banner says so, the next message works."""

from __future__ import annotations

import os
import signal

from app.main_window import CRASH_TEXT
from tests.app.conftest import ANSWER_TIMEOUT_MS
from tests.app.helpers import fresh_chat, send_and_wait, type_and_send


def test_a_killed_worker_shows_a_banner_and_the_next_message_works(qtbot, window, engine, store):
    chat_id = fresh_chat(window, max_tokens=400)
    type_and_send(qtbot, window, "Write a long poem about the sea.")
    model = window.controller.conversation(chat_id)
    qtbot.waitUntil(lambda: model.rowCount() == 2 and len(model.message(1).content) > 10, timeout=ANSWER_TIMEOUT_MS)
    qtbot.wait(600)  # past one incremental save, so the store holds part of the answer already
    saved_mid_answer = store.messages(chat_id)[1].content
    assert saved_mid_answer, "nothing was saved while the answer streamed"

    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS) as blocker:
        os.kill(engine.supervisor.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: window.banner.isVisible() and window.banner.text == CRASH_TEXT, timeout=10_000)

    cut = blocker.args[0].message
    assert cut.stats.finish_reason == "error" and cut.content.startswith(saved_mid_answer)
    assert store.messages(chat_id)[1].content == cut.content
    assert "engine stopped" in window.chats.view.bubbles[-1].error.text()
    assert not window.chats.composer.engine_ready  # no sending into a dead worker

    qtbot.waitUntil(lambda: engine.state.ready, timeout=120_000)
    assert window.banner.text != CRASH_TEXT
    window.chats.settings_panel.max_tokens.setValue(12)
    window.chats.settings_panel.apply_now()
    outcome = send_and_wait(qtbot, window, "Are you back?")
    assert outcome.error is None and outcome.message.content
