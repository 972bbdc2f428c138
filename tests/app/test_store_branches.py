"""Branches in the chat store, without a window: a regenerated answer or an edited question is kept beside
the one it replaces, any branch can be shown again (the path below it as it was last shown), a chat can be
forked at a message, exports carry the tree, and all of it survives a restart and a recovery copy."""

from __future__ import annotations

import json
import sqlite3

import pytest
from sqlalchemy import text

from app.store import (
    AnswerStats,
    AnswerSteps,
    ChatSettings,
    ChatStore,
    SamplingSettings,
    to_json,
    to_markdown,
)
from app.store.records import DocSource
from app.store.recovery import copy_chats

SOURCE = DocSource(number=1, label="[1] otters.md", uri="file:///docs/otters.md", path="/docs/otters.md", score=0.5,
                   text="Otters hold hands while they sleep.")  # fmt: skip
STATS = AnswerStats(tokens=7, tokens_per_second=30.0, ttft=0.08, finish_reason="stop", model="m")


def contents(store: ChatStore, chat_id: int) -> list[str]:
    return [m.content for m in store.messages(chat_id)]


def test_regenerating_keeps_every_answer_and_a_switch_shows_the_branch_last_seen_below(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat = store.create_chat(ChatSettings(model="m"))
        q = store.add_message(chat.id, "user", "Why do otters hold hands?")
        a1 = store.add_message(chat.id, "assistant", "first answer", STATS)
        a2 = store.add_sibling(a1.id, "second answer", STATS)  # regenerate
        a3 = store.add_sibling(a2.id, "third answer", STATS)  # and again
        assert (a2.parent_id, a3.parent_id, a3.role) == (q.id, q.id, "assistant")
        assert contents(store, chat.id) == ["Why do otters hold hands?", "third answer"]
        assert store.siblings(a1.id) == [a1.id, a2.id, a3.id]
        assert [store.branch_info(a.id) for a in (a1, a2, a3)] == [(1, 3), (2, 3), (3, 3)]
        assert store.branch_counts(chat.id) == {q.id: (1, 1), a3.id: (3, 3)}

        q2 = store.add_message(chat.id, "user", "Do they sleep in the water?")  # below the leaf: a3
        b1 = store.add_message(chat.id, "assistant", "Yes, floating.")
        b2 = store.add_sibling(b1.id, "Yes, on their backs.")
        assert q2.parent_id == a3.id and contents(store, chat.id)[-3:] == ["third answer", q2.content, b2.content]

        shown = store.switch_branch(a1.id)  # "1 of 3"
        assert [m.id for m in shown] == [q.id, a1.id] == [m.id for m in store.messages(chat.id)]
        q3 = store.add_message(chat.id, "user", "And in winter?")  # continues the first answer's branch
        assert q3.parent_id == a1.id and store.branch_counts(chat.id)[a1.id] == (1, 3)

        store.switch_branch(b1.id)  # below the third answer, the older of its two replies
        store.switch_branch(q3.id)
        shown = store.switch_branch(a3.id)  # back: the reply last shown there, not the newest one
        assert [m.id for m in shown] == [q.id, a3.id, q2.id, b1.id]
        assert store.branch_counts(chat.id) == {q.id: (1, 1), a3.id: (3, 3), q2.id: (1, 1), b1.id: (1, 2)}
        assert [m.id for m in store.switch_branch(a1.id)] == [q.id, a1.id, q3.id]
    finally:
        store.close()

    store = ChatStore(tmp_path)  # after a restart: the same path, the same branches
    try:
        assert contents(store, chat.id) == [q.content, "first answer", "And in winter?"]
        assert store.branch_info(a2.id) == (2, 3) and store.siblings(b2.id) == [b1.id, b2.id]
        assert [m.id for m in store.switch_branch(a3.id)] == [q.id, a3.id, q2.id, b1.id]
        assert len(store.all_messages(chat.id)) == 8
    finally:
        store.close()


def test_editing_a_question_starts_a_branch_and_the_old_answers_stay(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat = store.create_chat(ChatSettings(model="m"))
        q1 = store.add_message(chat.id, "user", "Name a river animal.")
        a1 = store.add_message(chat.id, "assistant", "The otter.", STATS)
        q2 = store.add_message(chat.id, "user", "How big is it?")
        a2 = store.add_message(chat.id, "assistant", "About a metre.", STATS, sources=[SOURCE])
        store.save_steps(a2.id, AnswerSteps(reasoning="otters are long"))

        edited = store.add_sibling(q2.id, "How heavy is it?")
        assert edited.role == "user" and contents(store, chat.id) == [q1.content, a1.content, "How heavy is it?"]
        store.add_message(chat.id, "assistant", "Around ten kilograms.", STATS)
        assert store.branch_counts(chat.id)[edited.id] == (2, 2)

        old = store.switch_branch(q2.id)  # the first wording and its answer, as they were
        assert [m.content for m in old] == [q1.content, a1.content, q2.content, "About a metre."]
        assert old[-1].sources == (SOURCE,) and old[-1].stats == STATS
        assert store.steps(a2.id).reasoning == "otters are long"

        first = store.add_sibling(q1.id, "Name a desert animal.")  # the first question edited: a new root
        assert first.parent_id is None and contents(store, chat.id) == ["Name a desert animal."]
        assert store.branch_info(q1.id) == (1, 2)
        assert store.get_chat(chat.id).title == "Name a river animal."  # the title stays what it was

        with pytest.raises(KeyError):
            store.add_message(chat.id, "user", "elsewhere", parent_id=a1.id + 1000)
        store.delete_messages_after(chat.id, q1.id)  # below the first question, every branch goes
        assert contents(store, chat.id) == ["Name a desert animal."]
        assert [m.content for m in store.switch_branch(q1.id)] == [q1.content]
        assert store.steps(a2.id) is None
    finally:
        store.close()


def _branched_chat(store: ChatStore) -> tuple[int, dict[str, int]]:
    settings = ChatSettings(model="m", system_prompt="Be brief.", sampling=SamplingSettings(temperature=0.1, seed=4),
                            thinking=True, tool_first=True)  # fmt: skip
    chat = store.create_chat(settings, title="Otters")
    store.set_collections(chat.id, ["animals"])
    q = store.add_message(chat.id, "user", "Why do otters hold hands?")
    old = store.add_message(chat.id, "assistant", "So they do not drift apart.", STATS, sources=[SOURCE])
    store.save_steps(old.id, AnswerSteps(reasoning="they sleep in water", calls=[{"id": "c1", "name": "lookup",
                     "arguments": "{}", "status": "done", "result": "rafts"}]))  # fmt: skip
    new = store.add_sibling(old.id, "To stay together asleep.", STATS)
    q2 = store.add_message(chat.id, "user", "Thanks")
    return chat.id, {"q": q.id, "old": old.id, "new": new.id, "q2": q2.id}


def test_a_fork_copies_the_path_with_its_steps_sources_and_the_chats_settings(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat_id, ids = _branched_chat(store)
        store.switch_branch(ids["old"])
        fork = store.fork_chat(chat_id, ids["old"])
        source = store.get_chat(chat_id)
        assert fork.id != chat_id and fork.title == "Otters (fork)"
        assert fork.settings == source.settings and fork.settings.thinking is True and fork.collections == ("animals",)
        copied = store.messages(fork.id)
        assert [m.content for m in copied] == ["Why do otters hold hands?", "So they do not drift apart."]
        assert copied[1].stats == STATS and copied[1].sources == (SOURCE,) and copied[1].parent_id == copied[0].id
        assert store.steps(copied[1].id) == store.steps(ids["old"]) and store.steps(copied[1].id).calls[0]["result"] == "rafts"
        assert store.branch_counts(fork.id) == {copied[0].id: (1, 1), copied[1].id: (1, 1)}  # one branch only
        store.add_message(fork.id, "user", "Only in the fork")
        assert len(store.all_messages(chat_id)) == 4  # the original is untouched
        with pytest.raises(KeyError):
            store.fork_chat(chat_id, copied[0].id)  # a message of another chat
    finally:
        store.close()


def test_json_export_has_the_tree_and_markdown_the_path_shown(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat_id, ids = _branched_chat(store)
        chat, path = store.get_chat(chat_id), store.messages(chat_id)
        data = json.loads(to_json(chat, path, store.chat_steps(chat_id), tree=store.all_messages(chat_id)))
        md = to_markdown(chat, path, store.chat_steps(chat_id))
    finally:
        store.close()
    by_id = {m["id"]: m for m in data["messages"]}
    assert len(by_id) == 4 and data["active_leaf_id"] == ids["q2"]
    assert by_id[ids["old"]]["parent_id"] == by_id[ids["new"]]["parent_id"] == ids["q"]
    assert by_id[ids["old"]]["steps"]["reasoning"] == "they sleep in water" and by_id[ids["old"]]["sources"][0]["score"] == 0.5
    assert data["settings"]["thinking"] is True and data["settings"]["tool_first"] is True
    rebuilt, at = [], data["active_leaf_id"]  # a reader follows parent_id up from the leaf
    while at is not None:
        rebuilt.append(by_id[at]["content"])
        at = by_id[at]["parent_id"]
    assert rebuilt[::-1] == [m.content for m in path] == ["Why do otters hold hands?", "To stay together asleep.", "Thanks"]
    assert "To stay together asleep." in md and "So they do not drift apart." not in md and "they sleep in water" not in md


def test_deleting_a_chat_deletes_every_branch(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat_id, ids = _branched_chat(store)
        other = store.create_chat()
        store.add_message(other.id, "user", "kept")
        store.delete_chat(chat_id)
        with store.engine.connect() as conn:
            left = conn.execute(text("SELECT chat_id, content FROM messages")).all()
        assert left == [(other.id, "kept")] and store.steps(ids["old"]) is None
    finally:
        store.close()


def test_a_recovery_copy_keeps_the_branches_and_the_branch_shown(tmp_path):
    (tmp_path / "old").mkdir()
    old = ChatStore(tmp_path / "old")
    try:
        chat_id, ids = _branched_chat(old)
        old.switch_branch(ids["old"])
        expected = [m.content for m in old.messages(chat_id)]
    finally:
        old.close()
    (tmp_path / "new").mkdir()
    new = ChatStore(tmp_path / "new")
    try:
        new.add_message(new.create_chat().id, "user", "a chat that was here first")  # the ids differ
        raw = new.engine.raw_connection()
        try:
            conn = raw.driver_connection
            assert isinstance(conn, sqlite3.Connection)
            assert copy_chats(tmp_path / "old" / "chats.db", conn).complete
        finally:
            raw.close()
        copied = next(c for c in new.list_chats() if c.title == "Otters")
        assert [m.content for m in new.messages(copied.id)] == expected
        answer = new.messages(copied.id)[1]
        assert new.branch_info(answer.id) == (1, 2) and copied.settings.tool_first is True
    finally:
        new.close()
