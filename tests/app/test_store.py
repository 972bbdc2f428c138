"""The store without a window: migrations, chats and messages, settings, export; and the pure
parts of the chat (context policy, SSE parsing)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

from sqlalchemy import text

from app.agent.steps import LEGACY_NAME, import_legacy_steps
from app.chat.context import estimate_tokens, fit_history
from app.store import (
    AnswerStats,
    AnswerSteps,
    AppSettings,
    ChatSettings,
    ChatStore,
    SamplingSettings,
    SettingsStore,
    migrate,
    to_json,
    to_markdown,
)
from app.store.chat_store import open_engine
from app.store.records import MessageRecord


def test_the_head_revision_constant_matches_the_migrations():
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_an_old_database_is_upgraded_with_its_chats_kept(tmp_path):
    engine = open_engine(tmp_path / "chats.db")
    migrate.upgrade(engine, "0001_initial")  # the database as the first release left it
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO chats (id, title, created_at, updated_at, model, system_prompt, temperature, top_p)"
            " VALUES (7, 'Old chat', '2025-01-01 10:00:00', '2025-01-01 10:00:00', 'm', '', 0.7, 0.95)"
        ))  # fmt: skip
        conn.execute(text(
            "INSERT INTO messages (chat_id, role, content, created_at, dropped_messages) VALUES (7, 'user', 'hi', '2025-01-01 10:00:00', 0)"
        ))  # fmt: skip
    engine.dispose()
    store = ChatStore(tmp_path)
    try:
        assert migrate.current_revision(store.engine) == migrate.HEAD_REVISION
        assert [c.title for c in store.list_chats()] == ["Old chat"]
        assert [m.content for m in store.messages(7)] == ["hi"]
        old = store.messages(7)[0]  # its row gained the steps column, empty
        assert store.steps(old.id) is None and store.save_steps(old.id, AnswerSteps(reasoning="r"))
    finally:
        store.close()


def test_chats_messages_search_and_stats_round_trip(tmp_path):
    store = ChatStore(tmp_path)
    try:
        settings = ChatSettings(model="m", system_prompt="Be brief.", sampling=SamplingSettings(temperature=0.2, max_tokens=64, seed=3))
        chat = store.create_chat(settings)
        store.add_message(chat.id, "user", "Tell me about   otters\nplease")
        answer = store.add_message(chat.id, "assistant", "", AnswerStats(model="m"))
        store.update_message(answer.id, "Otters hold hands.", AnswerStats(tokens=5, tokens_per_second=20.0, ttft=0.1, finish_reason="stop", model="m"))
        other = store.create_chat()
        store.add_message(other.id, "user", "Something else")

        assert store.get_chat(chat.id).title == "Tell me about otters please"
        long = store.create_chat()
        store.add_message(long.id, "user", "Write a short Python function that reverses a string, then explain it in one sentence.")
        assert store.get_chat(long.id).title == "Write a short Python function that reverses a string, then…"
        assert store.get_chat(chat.id).settings == settings
        assert [c.id for c in store.list_chats("hold hands")] == [chat.id]
        assert [c.id for c in store.list_chats()] == [long.id, other.id, chat.id]
        saved = store.messages(chat.id)[1]
        assert saved.content == "Otters hold hands." and saved.stats.tokens == 5 and saved.stats.finish_reason == "stop"

        store.delete_messages_after(chat.id, saved.id, inclusive=True)
        later = store.add_message(chat.id, "assistant", "again")
        assert later.id > saved.id  # ids are never reused
        store.delete_chat(chat.id)
        assert store.get_chat(chat.id) is None and store.messages(chat.id) == []
    finally:
        store.close()


CALL = {"id": "call_1", "name": "lookup", "arguments": '{"word": "otter"}', "server": "rec", "tool": "lookup",
        "status": "done", "result": "a river animal", "duration": 0.02, "round": 1}  # fmt: skip


def test_an_answers_steps_live_with_it_in_the_chat_store(tmp_path):
    store = ChatStore(tmp_path)
    chat = store.create_chat(ChatSettings(model="m"), title="Otters")
    question = store.add_message(chat.id, "user", "Why do otters hold hands?")
    answer = store.add_message(chat.id, "assistant", "", AnswerStats(model="m"))
    steps = AnswerSteps(reasoning="They drift apart\nwhen asleep.", thinking_seconds=1.5, thinking_tokens=9)
    store.update_message(answer.id, "So as not", AnswerStats(model="m"), steps=steps)  # saved mid-stream
    steps.calls.append(dict(CALL))
    steps.thinking_done = True
    assert store.save_steps(answer.id, steps)  # a finished tool call
    store.update_message(answer.id, "So as not to drift apart.", AnswerStats(model="m", finish_reason="stop"))
    store.close()
    store = ChatStore(tmp_path)  # after a restart
    try:
        assert store.steps(answer.id) == steps and store.steps(question.id) is None
        assert store.chat_steps(chat.id) == {answer.id: steps}
        assert store.reasoning_texts(chat.id) == {answer.id: "They drift apart\nwhen asleep."}
        messages = store.messages(chat.id)
        md = to_markdown(chat, messages, store.chat_steps(chat.id))
        assert md.index("> They drift apart") < md.index("`lookup`") < md.index("So as not to drift apart.")
        exported = json.loads(to_json(chat, messages, store.chat_steps(chat.id)))["messages"]
        assert "steps" not in exported[0] and exported[1]["steps"]["calls"][0]["result"] == "a river animal"
        store.delete_chat(chat.id)  # its steps go with it
        assert store.steps(answer.id) is None and not store.save_steps(answer.id, steps)
    finally:
        store.close()


def test_steps_of_agent_steps_db_move_into_the_chat_store_once(tmp_path):
    import sqlite3

    store = ChatStore(tmp_path)
    try:
        chat = store.create_chat(ChatSettings(model="m"))
        old = store.add_message(chat.id, "assistant", "an answer of the first agent release")
        newer = store.add_message(chat.id, "assistant", "already in the store")
        store.save_steps(newer.id, AnswerSteps(reasoning="kept"))
        db = sqlite3.connect(tmp_path / LEGACY_NAME)  # as app/agent/steps.py of that release wrote it
        db.execute("CREATE TABLE steps (message_id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
        rows = [(old.id, AnswerSteps(reasoning="hmm", calls=[dict(CALL)]).to_json()),
                (newer.id, AnswerSteps(reasoning="older").to_json()), (9999, "{}"), (old.id + 100, "not json")]  # fmt: skip
        db.executemany("INSERT INTO steps VALUES (?, ?)", rows)
        db.commit()
        db.close()
        assert import_legacy_steps(tmp_path, store) == 1
        assert not (tmp_path / LEGACY_NAME).exists()
        assert store.steps(old.id) == AnswerSteps(reasoning="hmm", calls=[dict(CALL)])
        assert store.steps(newer.id).reasoning == "kept"  # the store's own steps win
        assert import_legacy_steps(tmp_path, store) == 0  # once
    finally:
        store.close()


def test_app_settings_round_trip(tmp_path):
    store = ChatStore(tmp_path)
    try:
        settings = SettingsStore(store)
        assert settings.load() == AppSettings()
        wanted = AppSettings(expose_api=True, port=9999, api_key="k", cors_origins=("http://a", "http://b"), lan=True, theme="dark")
        settings.save(wanted)
        assert SettingsStore(store).load() == wanted
    finally:
        store.close()


def _msg(i: int, role: str, content: str) -> MessageRecord:
    return MessageRecord(id=i, chat_id=1, role=role, content=content, created_at=datetime(2025, 1, 1))


def test_export_as_markdown_and_json(tmp_path):
    store = ChatStore(tmp_path)
    try:
        chat = store.create_chat(ChatSettings(model="m", system_prompt="Be kind."), title="Otters")
        stats = AnswerStats(tokens=2, tokens_per_second=10.0, ttft=0.05, finish_reason="stop", model="m")
        messages = [_msg(1, "user", "Hi"), replace(_msg(2, "assistant", "Hello!"), stats=stats)]
        md = to_markdown(chat, messages)
        assert md.startswith("# Otters\n") and "## System\n\nBe kind." in md and "## You\n\nHi" in md
        assert "*2 tokens · 10.0 tokens/s · first token 50 ms · m*" in md
        data = json.loads(to_json(chat, messages))
        assert data["title"] == "Otters" and data["settings"]["system_prompt"] == "Be kind."
        assert data["messages"][1]["stats"]["tokens"] == 2 and "stats" not in data["messages"][0]
    finally:
        store.close()


def test_a_long_history_keeps_the_newest_turns_and_the_system_prompt():
    history = []
    for i in range(10):
        history += [_msg(2 * i, "user", f"q{i} " + "x" * 400), _msg(2 * i + 1, "assistant", f"a{i} " + "y" * 400)]
    history.append(_msg(99, "user", "the new question"))
    fit = fit_history(history, system_prompt="Be brief.", context_length=1024, max_tokens=128)
    assert fit.messages[0] == {"role": "system", "content": "Be brief."}
    assert fit.messages[-1]["content"] == "the new question"
    assert fit.messages[1]["role"] == "user"  # never starts with an orphaned answer
    assert 0 < fit.dropped < len(history)
    assert sum(estimate_tokens(m["content"]) for m in fit.messages) <= 1024 - 128
    assert fit.notice == f"{fit.dropped} earlier messages left out to fit the context"
    short = fit_history(history[-3:], system_prompt="", context_length=4096, max_tokens=None)
    assert short.dropped == 0 and short.notice == "" and len(short.messages) == 3


def test_earlier_thinking_goes_with_its_answer_for_the_engine_to_keep_or_drop():
    history = [_msg(1, "user", "2+2?"), _msg(2, "assistant", "4"), _msg(3, "user", "and 3+3?")]
    fit = fit_history(history, system_prompt="", context_length=4096, max_tokens=None, reasoning={2: "add them"})
    assert fit.messages == (
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "add them"},
        {"role": "user", "content": "and 3+3?"},
    )
