"""An answer cut off at its token limit offers Continue: the model goes on with the same message (the worker's
continue_final_message), and what it writes is added to that message."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.app.conftest import ANSWER_TIMEOUT_MS
from tests.app.helpers import bubbles, fresh_chat, send_and_wait

QUESTION = "Write a long story about a dragon who learns to bake bread."


def test_continue_goes_on_with_the_answer_cut_off_at_its_token_limit(qtbot, window, store):
    chat_id = fresh_chat(window, max_tokens=16)  # greedy: the same words every run
    whole = send_and_wait(qtbot, window, QUESTION).message.content  # 16 tokens of it, for comparison

    chat_id = fresh_chat(window, max_tokens=8)
    first = send_and_wait(qtbot, window, QUESTION).message
    assert first.stats.finish_reason == "length" and first.content
    answer = bubbles(window)[-1]
    assert answer.continue_button.isVisible()

    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(answer.continue_button, Qt.MouseButton.LeftButton)
    went_on = blocker.args[0].message

    assert blocker.args[0].error is None and went_on.id == first.id  # the same message, not a new answer
    assert went_on.content.startswith(first.content) and len(went_on.content) > len(first.content)
    # the model went on where it stopped, as if it had not been cut off: no new turn began
    assert went_on.content == whole
    user, kept = store.messages(chat_id)
    assert kept.id == first.id and kept.content == went_on.content and kept.stats.tokens == 16
    assert (
        len(bubbles(window)) == 2 and bubbles(window)[-1].message.content == went_on.content
    )  # one answer shown
    assert bubbles(window)[-1].continue_button.isVisible()  # cut off again at 8 more: it can go on again
