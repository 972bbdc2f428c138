"""The chat database locked by another process or damaged: the app starts, says what happened, keeps
the bad file, and no chat is lost without a word."""

from __future__ import annotations

import subprocess
import sys

from app.store import AnswerStats, ChatSettings, ChatStore
from app.store.chat_store import DB_NAME
from tests.app.conftest import open_window

PAGE = 4096


def fill(store: ChatStore, chats: int, *, words: int = 60) -> dict[int, list[str]]:
    """``chats`` chats of a question and a long answer each; their messages by chat id."""
    out = {}
    for i in range(chats):
        chat = store.create_chat(ChatSettings(model="m"))
        question = f"Question {i}: " + " ".join(f"q{i}w{j}" for j in range(words))
        answer = f"Answer {i}: " + " ".join(f"a{i}w{j}" for j in range(words))
        store.add_message(chat.id, "user", question)
        store.add_message(chat.id, "assistant", answer, AnswerStats(model="m", finish_reason="stop"))
        out[chat.id] = [question, answer]
    return out


def contents(store: ChatStore) -> set[tuple[str, ...]]:
    return {tuple(m.content for m in store.messages(c.id)) for c in store.list_chats()}


def test_a_file_that_is_not_a_database_is_kept_and_replaced(tmp_path):
    bad = b"this is not SQLite at all\n" * 500
    (tmp_path / DB_NAME).write_bytes(bad)
    store = ChatStore(tmp_path)
    try:
        assert store.problem is not None and "damaged" in store.problem and str(store.kept_copy) in store.problem
        assert store.kept_copy.read_bytes() == bad  # kept exactly as it was
        chat = store.create_chat(ChatSettings(model="m"))
        store.add_message(chat.id, "user", "hello again")
        assert [c.title for c in store.list_chats()] == ["hello again"]
    finally:
        store.close()


def test_a_damaged_page_keeps_the_file_and_recovers_every_readable_chat(tmp_path):
    store = ChatStore(tmp_path)
    original = fill(store, 60)
    store.close()
    path = tmp_path / DB_NAME
    data = bytearray(path.read_bytes())
    pages = len(data) // PAGE
    assert pages > 8
    broken = pages // 2
    data[broken * PAGE : (broken + 1) * PAGE] = b"\xa5" * PAGE  # one page of the messages overwritten
    path.write_bytes(bytes(data))

    store = ChatStore(tmp_path)
    try:
        assert store.problem is not None and "damaged" in store.problem
        assert store.kept_copy is not None and store.kept_copy.read_bytes() == bytes(data)
        recovered = contents(store)
        every = {tuple(v) for v in original.values()}
        whole = recovered & every
        assert len(whole) >= len(original) // 2  # one bad page costs a few chats at most
        # What came back is the real text, never a garbled row; what did not is said in the message.
        assert all(set(c) <= {m for v in original.values() for m in v} for c in recovered)
        if whole != every:
            assert "may be lost" in store.problem
    finally:
        store.close()
    assert ChatStore(tmp_path).problem is None  # the new database opens cleanly next time


LOCKER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA locking_mode=EXCLUSIVE")
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_database_locked_by_another_process_keeps_new_chats_aside_until_it_is_free(tmp_path):
    store = ChatStore(tmp_path)
    earlier = fill(store, 3, words=5)
    store.close()
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(tmp_path / DB_NAME)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert locker.stdout.readline().strip() == "locked"
        store = ChatStore(tmp_path, busy_timeout=0.2)
        try:
            assert store.problem is not None and "locked by another program" in store.problem
            assert store.list_chats() == []  # the earlier chats cannot be shown, and say so
            chat = store.create_chat(ChatSettings(model="m"))
            store.add_message(chat.id, "user", "written while locked")
            store.add_message(chat.id, "assistant", "kept aside", AnswerStats(model="m", finish_reason="stop"))
        finally:
            store.close()
    finally:
        locker.stdin.close()
        locker.wait(10)
    assert list(tmp_path.glob("chats-unsaved-*.db"))

    store = ChatStore(tmp_path)
    try:
        assert store.problem is None
        assert contents(store) == {tuple(v) for v in earlier.values()} | {("written while locked", "kept aside")}
        assert not list(tmp_path.glob("chats-unsaved-*.db*"))  # merged, then removed
    finally:
        store.close()


def test_the_window_says_what_happened_to_the_chats_after_the_engine_is_ready(qtbot, engine, theme, tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"garbage" * 1000)
    store = ChatStore(tmp_path)
    try:
        window = open_window(qtbot, store, engine, theme)
        assert engine.state.ready
        window.on_engine_state(engine.state)  # a ready engine does not hide the store's news
        assert window.banner.isVisible() and window.banner.text == store.problem
        assert str(store.kept_copy) in window.banner.text
    finally:
        store.close()
