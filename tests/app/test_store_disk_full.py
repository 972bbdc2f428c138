"""The disk fills up while an answer streams: the answer goes on and stays in memory, the window says the
disk is full (a notice, not the crash dialog), and the answer is saved once there is room again.

The fault is SQLite's own error for a full disk (``sqlite3.OperationalError: database or disk is full``,
SQLITE_FULL), raised where the store's engine executes its writes: an event hook on that engine, so the
window, the answer run and the store are the real ones."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import event

from app.disk_full import DISK_FULL_TEXT, SAVED_TEXT
from app.store import ChatStore
from app.store.chat_store import DB_NAME
from tests.app.conftest import ANSWER_TIMEOUT_MS, open_window
from tests.app.helpers import fresh_chat, type_and_send


class FullDisk:
    """Makes every UPDATE of ``store`` fail as SQLite does when the disk is full, while ``full`` is set."""

    def __init__(self, store: ChatStore) -> None:
        self.full = False
        self.refused = 0
        event.listen(store.engine, "do_execute", self._execute)

    def _execute(self, cursor, statement, parameters, context):
        if self.full and statement.lstrip().upper().startswith("UPDATE"):
            self.refused += 1
            exc = sqlite3.OperationalError("database or disk is full")
            exc.sqlite_errorcode = sqlite3.SQLITE_FULL
            exc.sqlite_errorname = "SQLITE_FULL"
            raise exc
        return False  # SQLAlchemy runs the statement itself


def on_disk(folder, message_id: int) -> tuple[str, str | None]:
    """The answer's text and finish reason as the database file has them (another connection)."""
    db = sqlite3.connect(f"file:{folder / DB_NAME}?mode=ro", uri=True)
    try:
        return db.execute("SELECT content, finish_reason FROM messages WHERE id = ?", (message_id,)).fetchone()
    finally:
        db.close()


@pytest.fixture
def store(tmp_path):
    chats = ChatStore(tmp_path)
    yield chats
    chats.close()


def test_an_answer_streamed_onto_a_full_disk_is_kept_and_saved_when_there_is_room(qtbot, store, engine, theme, tmp_path):
    window = open_window(qtbot, store, engine, theme)
    disk = FullDisk(store)
    try:
        chat_id = fresh_chat(window, max_tokens=160)
        model = window.controller.conversation(chat_id)
        with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS) as finished:
            type_and_send(qtbot, window, "Write a long story about a dragon who learns to bake bread.")
            qtbot.waitUntil(lambda: model.rowCount() == 2 and bool(on_disk(tmp_path, model.message(1).id)[0]), timeout=ANSWER_TIMEOUT_MS)
            answer_id = model.message(1).id
            disk.full = True  # the disk fills up mid-answer
            qtbot.waitUntil(lambda: window.banner.isVisible() and window.banner.text == DISK_FULL_TEXT, timeout=10_000)
        answer = finished.args[0].message

        assert finished.args[0].error is None and disk.refused > 0
        saved_text, saved_reason = on_disk(tmp_path, answer_id)
        assert saved_reason is None and len(saved_text) < len(answer.content)  # the disk has only the start
        # The whole answer is kept in memory and shown, also when the chat is read again.
        assert answer.stats.finish_reason in ("stop", "length")
        assert model.message(1).content == answer.content
        kept = store.messages(chat_id)[1]
        assert (kept.content, kept.stats.finish_reason) == (answer.content, answer.stats.finish_reason)
        assert window.banner.text == DISK_FULL_TEXT

        disk.full = False  # space is freed: the next retry saves it
        qtbot.waitUntil(lambda: on_disk(tmp_path, answer_id) == (answer.content, answer.stats.finish_reason), timeout=10_000)
        qtbot.waitUntil(lambda: window.banner.text == SAVED_TEXT, timeout=5_000)
        assert not store.disk_full
    finally:
        window.controller.stop_all()
        qtbot.waitUntil(lambda: not window.controller.answering_chats(), timeout=10_000)
        window.disk_full.close()
