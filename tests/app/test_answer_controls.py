"""An answer's controls under it: none of copy, regenerate and fork while it streams; an answer stopped before
its first token says so, and can be answered again (its row stays: the store keeps every version)."""

from __future__ import annotations

from dataclasses import replace

from app.chat.conversation_model import ConversationModel
from app.store import AnswerStats
from app.theme import LIGHT
from app.widgets.chat_view import ChatView


def _view(qtbot, chat_store):
    chat = chat_store.create_chat()
    chat_store.add_message(chat.id, "user", "Hello")
    model = ConversationModel(chat.id, chat_store.messages(chat.id))
    view = ChatView(LIGHT)
    qtbot.addWidget(view)
    view.set_model(model)
    view.show()
    answer = chat_store.add_message(chat.id, "assistant", "", AnswerStats(model="m"))
    model.append(answer, streaming=True)
    return view, model, answer


def _tools(bubble) -> dict[str, bool]:
    buttons = {"copy": bubble.copy_button, "regenerate": bubble.regenerate_button, "fork": bubble.fork_button}
    return {name: not b.isHidden() for name, b in buttons.items()}


def test_a_streaming_answer_has_no_controls_until_it_ends(qtbot, chat_store):
    view, model, answer = _view(qtbot, chat_store)
    assert view.bubbles[-1].stats.text() == "Generating…"
    assert _tools(view.bubbles[-1]) == {"copy": False, "regenerate": False, "fork": False}
    model.replace(replace(answer, content="Hi there"), streaming=True)
    view._render_dirty()
    assert _tools(view.bubbles[-1]) == {"copy": False, "regenerate": False, "fork": False}

    done = replace(answer, content="Hi there", stats=AnswerStats(model="m", tokens=3, finish_reason="stop"))
    model.replace(done, streaming=False)
    assert _tools(view.bubbles[-1]) == {"copy": True, "regenerate": True, "fork": True}
    assert _tools(view.bubbles[0])["copy"]  # the question's own controls are there all along


def test_an_answer_stopped_before_its_first_token_says_so_and_can_be_answered_again(qtbot, chat_store):
    view, model, answer = _view(qtbot, chat_store)
    stopped = replace(answer, stats=AnswerStats(model="m", tokens=0, finish_reason="cancelled"))
    model.replace(stopped, streaming=False)
    bubble = view.bubbles[-1]
    assert bubble.stats.text() == "Stopped before any answer"
    assert _tools(bubble) == {"copy": False, "regenerate": True, "fork": True}  # nothing to copy
    with qtbot.waitSignal(view.regenerate_clicked, timeout=1000):
        bubble.regenerate_button.click()
