"""Documents kept with chats in the store, without a window: the collections a chat has attached and the
sources each answer was given survive a restart and an upgrade from an older database, are exported, and
come along when chats are copied out of a damaged database."""

from __future__ import annotations

import json
import sqlite3

from sqlalchemy import text

from app.store import AnswerStats, ChatStore, migrate, to_json, to_markdown
from app.store.chat_store import open_engine
from app.store.records import DocSource
from app.store.recovery import copy_chats

SOURCES = (
    DocSource(
        number=1,
        label="[1] manual.pdf, page 2",
        uri="file:///home/ann/docs/manual.pdf#page=2",
        path="/home/ann/docs/manual.pdf",
        score=0.0325,
        text="To reset the thermostat, hold the mode button down for ten seconds." + " More." * 400,
        page=2,
        heading="Thermostat",
    ),
    DocSource(number=2, label="[2] garden.md, Tomatoes", uri="file:///home/ann/docs/garden.md",
              path="/home/ann/docs/garden.md", score=None, text="Water at the base.", heading="Tomatoes"),
)


def _chat_with_documents(store: ChatStore) -> tuple[int, int]:
    chat = store.create_chat()
    store.set_collections(chat.id, ["manuals", "garden", "manuals"])
    store.add_message(chat.id, "user", "How do I reset the thermostat?")
    answer = store.add_message(chat.id, "assistant", "Hold the mode button [1].", AnswerStats(model="m"), sources=SOURCES)
    store.add_message(chat.id, "user", "Thanks")
    return chat.id, answer.id


def test_attached_collections_and_sources_come_back_after_a_restart(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat_id, answer_id = _chat_with_documents(store)
    finally:
        store.close()
    store = ChatStore(tmp_path)  # the app started again on the same data folder
    try:
        assert store.get_chat(chat_id).collections == ("garden", "manuals")
        user, answer, thanks = store.messages(chat_id)
        assert answer.id == answer_id and [s.label for s in answer.sources] == [s.label for s in SOURCES]
        first = answer.sources[0]
        assert (first.uri, first.page, first.heading, first.score) == (SOURCES[0].uri, 2, "Thermostat", 0.0325)
        assert first.text.startswith("To reset the thermostat") and len(first.text) <= 1000  # an excerpt is kept
        assert user.sources == () == thanks.sources
        store.set_collections(chat_id, [])
        assert store.get_chat(chat_id).collections == ()
    finally:
        store.close()


def test_an_older_database_gains_documents_with_its_chats_kept(tmp_path):
    engine = open_engine(tmp_path / "chats.db")
    migrate.upgrade(engine, "0002_message_steps")  # before documents were kept with chats
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO chats (id, title, created_at, updated_at, model, system_prompt, temperature, top_p)"
            " VALUES (3, 'Old chat', '2025-01-01 10:00:00', '2025-01-01 10:00:00', 'm', '', 0.7, 0.95)"
        ))  # fmt: skip
        conn.execute(text(
            "INSERT INTO messages (chat_id, role, content, created_at, dropped_messages)"
            " VALUES (3, 'assistant', 'an old answer', '2025-01-01 10:00:00', 0)"
        ))  # fmt: skip
    engine.dispose()
    store = ChatStore(tmp_path)
    try:
        assert migrate.current_revision(store.engine) == migrate.HEAD_REVISION
        [chat] = store.list_chats()
        assert (chat.title, chat.collections) == ("Old chat", ())
        [old] = store.messages(3)
        assert (old.content, old.sources) == ("an old answer", ())
        assert store.set_collections(3, ["manuals"]).collections == ("manuals",)
    finally:
        store.close()


def test_a_damaged_sources_row_shows_the_answer_without_them(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat_id, answer_id = _chat_with_documents(store)
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE messages SET doc_sources = '[{\"number\": 1}' WHERE id = :i"), {"i": answer_id})
            conn.execute(text("UPDATE chats SET doc_collections = 'not json' WHERE id = :i"), {"i": chat_id})
        answer = next(m for m in store.messages(chat_id) if m.id == answer_id)
        assert answer.content == "Hold the mode button [1]." and answer.sources == ()
        assert store.get_chat(chat_id).collections == ()
    finally:
        store.close()


def test_exports_carry_each_answers_sources(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat_id, _ = _chat_with_documents(store)
        chat, messages = store.get_chat(chat_id), store.messages(chat_id)
    finally:
        store.close()
    data = json.loads(to_json(chat, messages))
    assert data["collections"] == ["garden", "manuals"]
    exported = data["messages"][1]["sources"]
    assert [s["label"] for s in exported] == ["[1] manual.pdf, page 2", "[2] garden.md, Tomatoes"]
    assert exported[0]["uri"].endswith("manual.pdf#page=2") and exported[0]["score"] == 0.0325
    assert "sources" not in data["messages"][0] and "sources" not in data["messages"][2]
    md = to_markdown(chat, messages)
    assert "**Sources**" in md
    assert "- [1] manual.pdf, page 2 · score 0.033 · <file:///home/ann/docs/manual.pdf#page=2>" in md
    assert md.index("Hold the mode button [1].") < md.index("**Sources**") < md.index("## You\n\nThanks")


def test_chats_copied_out_of_a_damaged_database_keep_their_documents(tmp_path):
    (tmp_path / "old").mkdir()
    old = ChatStore(tmp_path / "old")
    try:
        chat_id, _ = _chat_with_documents(old)
    finally:
        old.close()
    (tmp_path / "new").mkdir()
    new = ChatStore(tmp_path / "new")
    try:
        raw = new.engine.raw_connection()
        try:
            conn = raw.driver_connection
            assert isinstance(conn, sqlite3.Connection)
            copied = copy_chats(tmp_path / "old" / "chats.db", conn)
        finally:
            raw.close()
        assert copied.chats == 1 and copied.complete
        [chat] = new.list_chats()
        assert chat.collections == ("garden", "manuals")
        assert [len(m.sources) for m in new.messages(chat.id)] == [0, 2, 0]
    finally:
        new.close()
