"""The Chats page against a real worker: streaming, stop, regenerate, edit, restart, long chats."""

from __future__ import annotations

import json

from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QMessageBox

from app.net.types import LoadedModelStats, StatsSnapshot
from app.store import ChatStore, SettingsStore
from app.store.records import AnswerStats
from app.theme import DARK, LIGHT
from app.widgets.markdown import render_blocks
from engine.starter import STARTER_NAME
from tests.app.conftest import ANSWER_TIMEOUT_MS, open_window
from tests.app.helpers import bubbles, fresh_chat, send_and_wait, type_and_send


def test_a_message_is_answered_by_streaming(qtbot, window, store):
    chat_id = fresh_chat(window, max_tokens=32)
    renders = []
    model = window.controller.conversation(chat_id)
    model.dataChanged.connect(lambda top, _bottom, _roles=(): renders.append(model.is_streaming(model.message(top.row()).id)))

    outcome = send_and_wait(qtbot, window, "Name three colours.")

    assert outcome.error is None
    assert renders.count(True) >= 2, "the answer arrived in one piece, not streamed"
    user, answer = store.messages(chat_id)
    assert user.content == "Name three colours."
    assert answer.content.strip() and answer.content == outcome.message.content
    assert answer.stats.finish_reason in ("stop", "length")
    assert answer.stats.tokens > 0 and answer.stats.ttft is not None and answer.stats.tokens_per_second
    footer = bubbles(window)[-1].stats.text()
    assert "tok/s" in footer and "tokens" in footer and "first token" in footer
    assert window.chats.title.full_text() == "Name three colours."


def test_stop_keeps_the_partial_answer(qtbot, window, store):
    chat_id = fresh_chat(window, max_tokens=400)
    type_and_send(qtbot, window, "Write a long story about a dragon who learns to bake bread.")
    model = window.controller.conversation(chat_id)
    qtbot.waitUntil(lambda: model.rowCount() == 2 and len(model.message(1).content) > 0, timeout=ANSWER_TIMEOUT_MS)

    with qtbot.waitSignal(window.controller.answer_finished, timeout=10_000) as blocker:
        window.chats.composer.button.click()  # the send button is Stop while answering

    answer = blocker.args[0].message
    assert answer.stats.finish_reason == "cancelled"
    assert answer.content and answer.stats.tokens < 400
    assert store.messages(chat_id)[1].content == answer.content
    assert "stopped" in bubbles(window)[-1].stats.text()
    assert not window.chats.composer.answering


def test_regenerate_replaces_the_last_answer(qtbot, window, store):
    chat_id = fresh_chat(window, max_tokens=16)
    first = send_and_wait(qtbot, window, "Say hello.").message

    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS) as blocker:
        bubbles(window)[-1].regenerate_button.click()

    second = blocker.args[0].message
    saved = store.messages(chat_id)
    assert [m.role for m in saved] == ["user", "assistant"]
    assert saved[1].id == second.id != first.id
    assert saved[1].content == second.content and second.content


def test_edit_and_resend_drops_what_came_after(qtbot, window, store):
    chat_id = fresh_chat(window, max_tokens=12)
    send_and_wait(qtbot, window, "What is the capital of France?")
    send_and_wait(qtbot, window, "And of Italy?")
    assert len(store.messages(chat_id)) == 4

    first_user = bubbles(window)[0]
    first_user.edit_button.click()
    first_user.editor.setPlainText("What is the capital of Spain?")
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS):
        first_user.send_edit.click()

    saved = store.messages(chat_id)
    assert [m.role for m in saved] == ["user", "assistant"]
    assert saved[0].content == "What is the capital of Spain?"
    assert saved[1].content
    assert len(bubbles(window)) == 2 and bubbles(window)[0].body.text() == "What is the capital of Spain?"


def test_restarting_the_app_finds_the_chat_intact(qtbot, window, engine, theme, hearth_home):
    chat_id = fresh_chat(window, max_tokens=16)
    answer = send_and_wait(qtbot, window, "Tell me a fun fact.").message
    window.close()

    reopened_store = ChatStore(hearth_home)  # a new connection, as after a relaunch
    try:
        again = open_window(qtbot, reopened_store, engine, theme)
        page = again.chats
        titles = [page.list_model.chat(r).title for r in range(page.list_model.rowCount())]
        assert "Tell me a fun fact." in titles
        page.open_chat(chat_id)
        shown = bubbles(again)
        assert [b.message.content for b in shown] == ["Tell me a fun fact.", answer.content]
        assert shown[1].message.stats.tokens == answer.stats.tokens
        assert "tok/s" in shown[1].stats.text()
    finally:
        reopened_store.close()


def test_a_long_chat_leaves_out_the_oldest_turns_and_says_so(qtbot, window, store):
    chat_id = fresh_chat(window, max_tokens=16)
    filler = "The quick brown fox jumps over the lazy dog. " * 20  # ~900 characters a message
    for i in range(6):
        store.add_message(chat_id, "user", f"Question {i}: {filler}")
        store.add_message(chat_id, "assistant", f"Answer {i}: {filler}")
    window.controller.forget(chat_id)
    window.chats.open_chat(chat_id)
    # Believe the model has a far longer context than the worker gives it, so the first try
    # overflows and the worker answers context_length_exceeded: the app must retry, not fail.
    window.controller.learn_stats(StatsSnapshot(models=(LoadedModelStats(name=STARTER_NAME, n_ctx=16384),)))

    outcome = send_and_wait(qtbot, window, "Summarise our chat in one line.")

    assert outcome.error is None, outcome.error
    dropped = outcome.message.stats.dropped_messages
    assert 0 < dropped < 13
    assert store.messages(chat_id)[-1].stats.dropped_messages == dropped
    notice = bubbles(window)[-1].notice
    assert notice.isVisible() and notice.text() == f"{dropped} earlier messages left out to fit the context"


def test_two_chats_answer_at_once(qtbot, window, store):
    finished = []
    window.controller.answer_finished.connect(finished.append)
    first = fresh_chat(window, max_tokens=200)
    type_and_send(qtbot, window, "Count from one to fifty in words.")
    model = window.controller.conversation(first)
    qtbot.waitUntil(lambda: model.rowCount() == 2 and bool(model.message(1).content), timeout=ANSWER_TIMEOUT_MS)

    second = fresh_chat(window, max_tokens=24)
    assert second != first
    type_and_send(qtbot, window, "List the days of the week.")
    assert set(window.controller.answering_chats()) == {first, second}
    row = window.chats.list_model.row_of(first)
    assert window.chats.list_model.index(row).data().startswith("● ")  # still answering, out of view

    qtbot.waitUntil(lambda: len(finished) == 2, timeout=ANSWER_TIMEOUT_MS)
    assert {o.chat_id for o in finished} == {first, second}
    assert all(o.error is None and o.message.content for o in finished)
    assert store.messages(first)[1].content == next(o for o in finished if o.chat_id == first).message.content


def test_search_rename_export_and_delete(qtbot, window, store, tmp_path):
    chat_id = fresh_chat(window, max_tokens=8)
    send_and_wait(qtbot, window, "Tell me about aardvarks.")
    page = window.chats
    page.sidebar.search.setText("aardvark")
    qtbot.waitUntil(lambda: page.list_model.rowCount() >= 1 and all(
        "aardvark" in (page.list_model.chat(r).title.lower() + " ".join(m.content.lower() for m in store.messages(page.list_model.chat(r).id)))
        for r in range(page.list_model.rowCount())
    ), timeout=5000)
    row = page.list_model.row_of(chat_id)
    assert page.list_model.setData(page.list_model.index(row), "Aardvark facts")
    assert store.get_chat(chat_id).title == "Aardvark facts"

    page.write_export(chat_id, tmp_path / "chat.md", "md")
    page.write_export(chat_id, tmp_path / "chat.json", "json")
    assert (tmp_path / "chat.md").read_text().startswith("# Aardvark facts")
    data = json.loads((tmp_path / "chat.json").read_text())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert data["messages"][1]["stats"]["tokens"] > 0

    page.confirm_delete(chat_id)
    box = next(w for w in page.findChildren(QMessageBox) if w.isVisible())
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: store.get_chat(chat_id) is None, timeout=5000)
    assert page.list_model.row_of(chat_id) == -1


def test_an_answer_left_mid_stream_by_a_dead_app_is_shown_as_interrupted(qtbot, window, store):
    # What an app killed mid-answer leaves behind: the last half-second save, no finish reason.
    chat = store.create_chat()
    store.add_message(chat.id, "user", "Tell me a story.")
    store.add_message(chat.id, "assistant", "Once upon a time", AnswerStats(tokens=4, model=STARTER_NAME))

    window.chats.refresh_list()
    window.chats.open_chat(chat.id)

    answer = bubbles(window)[-1]
    assert answer.body.text() == "Once upon a time"
    qtbot.waitUntil(answer.error.isVisible, timeout=5000)  # new widgets show on the next event loop pass
    assert "interrupted" in answer.error.text()
    assert store.messages(chat.id)[-1].stats.finish_reason == "error"  # marked once, not on every load
    assert bubbles(window)[-1].regenerate_button.isVisible()


def test_choosing_the_dark_theme_restyles_open_chats_and_is_remembered(qtbot, window, store, theme):
    chat = store.create_chat()
    store.add_message(chat.id, "user", "Show me code.")
    store.add_message(chat.id, "assistant", "```python\nprint('hi')\n```", AnswerStats(tokens=5, finish_reason="stop"))
    window.chats.open_chat(chat.id)
    (code,) = bubbles(window)[-1].body.code_blocks()
    light_html = code.block.html
    try:
        window.nav.theme_button.menu().actions()[2].trigger()  # "Dark"
        assert QApplication.palette().color(QPalette.ColorRole.Window).name() == DARK.window
        (code,) = bubbles(window)[-1].body.code_blocks()
        assert code.block.html != light_html and code.block.html == render_blocks("```python\nprint('hi')\n```", DARK)[0].html
        assert SettingsStore(store).load().theme == "dark"
    finally:
        window.choose_theme("light")
    assert QApplication.palette().color(QPalette.ColorRole.Window).name() == LIGHT.window


def test_a_closed_window_gets_no_answer_to_the_requests_it_had_in_flight(qtbot, store, engine, theme):
    """Its pages are going: an answer arriving then would reach widgets that are gone."""
    from tests.app.conftest import open_window

    win = open_window(qtbot, store, engine, theme)
    got = []
    for call in (win.api.stats(), win.api.models(), win.api.hardware()):
        call.succeeded.connect(got.append)
        call.failed.connect(got.append)
    win.close()  # before the event loop could deliver any of them
    qtbot.wait(1500)
    assert got == []
    calls = [win.api.stats()]  # a later request is answered as before
    calls[0].succeeded.connect(got.append)
    qtbot.waitUntil(lambda: len(got) == 1, timeout=30_000)
