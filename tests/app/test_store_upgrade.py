"""A data folder of the release before branches opened by this one: every chat becomes one branch with
nothing lost, and each chat's thinking and tool-first switches and its MCP servers move from mcp-servers.json
into its row."""

from __future__ import annotations

import json
import logging

from sqlalchemy import text

from app.store import AnswerStats, AnswerSteps, ChatSettings, ChatStore, migrate, to_json
from app.store.chat_store import open_engine
from app.store.records import DocSource
from engine.agent.config import McpServerStore

SOURCE = DocSource(number=1, label="[1] tea.md", uri="file:///docs/tea.md", path="/docs/tea.md", score=0.25, text="Steep for three minutes.")  # fmt: skip
STEPS = AnswerSteps(reasoning="green tea is delicate", thinking_seconds=0.5, thinking_done=True,
                    calls=[{"id": "c1", "name": "lookup", "arguments": "{}", "status": "done", "result": "80 C"}])  # fmt: skip
OTHER_KEYS = {
    "servers": {"rec": {"command": "python", "args": ["-m", "rec"], "env": {}, "enabled": True}},
    "always_allow": ["rec/lookup"],
}
CHAT_SERVERS = {"1": ["rec", "gone"], "99": ["rec"]}  # a removed server's name and a deleted chat's entry too
T = "2025-03-01 10:00:0{}"


def _old_data_folder(folder) -> None:
    """chats.db at 0004 (rows as that release wrote them: two chats, their messages interleaved) and its
    mcp-servers.json with the switches."""
    engine = open_engine(folder / "chats.db")
    migrate.upgrade(engine, "0004_drafted_tokens")
    with engine.begin() as conn:
        for chat_id, title, collections in ((1, "Tea", '["recipes"]'), (2, "Coffee", "[]")):
            conn.execute(text(
                "INSERT INTO chats (id, title, created_at, updated_at, model, system_prompt, temperature, top_p,"
                " max_tokens, seed, doc_collections) VALUES (:id, :title, :t, :t, 'm', 'Be brief.', 0.2, 0.9, 64, 5, :c)"
            ), {"id": chat_id, "title": title, "t": T.format(0), "c": collections})  # fmt: skip
        rows = [
            (1, "user", "How long do I steep green tea?", None, None, None),
            (2, "user", "Espresso or drip?", None, None, None),
            (1, "assistant", "Three minutes at 80 C.", 9, STEPS.to_json(), json.dumps([SOURCE.as_dict()])),
            (1, "user", "And black tea?", None, None, None),
            (2, "assistant", "Drip, for a crowd.", 4, None, None),
            (1, "assistant", "Four to five minutes.", 5, None, None),
        ]
        for i, (chat_id, role, content, tokens, steps, sources) in enumerate(rows):
            conn.execute(text(
                "INSERT INTO messages (chat_id, role, content, created_at, model, tokens, tokens_per_second, ttft,"
                " finish_reason, dropped_messages, steps, doc_sources, drafted_tokens)"
                " VALUES (:c, :r, :content, :t, :m, :tokens, :tps, :ttft, :fin, 0, :steps, :src, :drafted)"
            ), {"c": chat_id, "r": role, "content": content, "t": T.format(i), "m": "m" if tokens else None,
                "tokens": tokens, "tps": 25.0 if tokens else None, "ttft": 0.1 if tokens else None,
                "fin": "stop" if tokens else None, "steps": steps, "src": sources, "drafted": 2 if tokens else 0})  # fmt: skip
    engine.dispose()
    flags = {**OTHER_KEYS, "chats": CHAT_SERVERS, "thinking": {"1": True, "2": False, "99": True}, "tool_first": {"1": True}}
    (folder / "mcp-servers.json").write_text(json.dumps(flags, indent=2), encoding="utf-8")


def test_an_older_data_folder_keeps_every_message_and_the_switches_move_into_the_chats(tmp_path):
    _old_data_folder(tmp_path)
    store = ChatStore(tmp_path)
    try:
        assert migrate.current_revision(store.engine) == migrate.HEAD_REVISION
        tea, coffee = store.get_chat(1), store.get_chat(2)
        assert (tea.settings.thinking, tea.settings.tool_first) == (True, True)
        assert (coffee.settings.thinking, coffee.settings.tool_first) == (False, False)
        assert tea.settings.mcp_servers == ("rec", "gone") and coffee.settings.mcp_servers == ()
        assert tea.settings.sampling.max_tokens == 64 and tea.settings.system_prompt == "Be brief."
        assert tea.collections == ("recipes",)
        messages = store.messages(1)
        assert [m.content for m in messages] == [
            "How long do I steep green tea?", "Three minutes at 80 C.", "And black tea?", "Four to five minutes."
        ]  # fmt: skip
        assert [m.content for m in store.messages(2)] == ["Espresso or drip?", "Drip, for a crowd."]
        assert [m.parent_id for m in messages] == [None, messages[0].id, messages[1].id, messages[2].id]
        answer = messages[1]
        assert answer.stats == AnswerStats(tokens=9, tokens_per_second=25.0, ttft=0.1, finish_reason="stop", model="m", accepted_draft_tokens=2)
        assert answer.sources == (SOURCE,) and store.steps(answer.id) == STEPS
        assert all(count == (1, 1) for count in store.branch_counts(1).values())
        exported = json.loads(to_json(tea, messages, store.chat_steps(1), tree=store.all_messages(1)))
        assert exported["active_leaf_id"] == messages[-1].id and exported["messages"][1]["steps"]["calls"][0]["result"] == "80 C"

        left = json.loads((tmp_path / "mcp-servers.json").read_text(encoding="utf-8"))
        assert left == OTHER_KEYS  # the switches and the chats' servers are gone, every other key as it was
        servers = McpServerStore(tmp_path / "mcp-servers.json")
        assert [s.name for s in servers.servers()] == ["rec"] and servers.always_allowed() == ["rec/lookup"]

        store.update_settings(2, ChatSettings(model="m", thinking=True))  # now saved with the chat
        regenerated = store.add_sibling(messages[3].id, "Five minutes.", AnswerStats(model="m"))
        assert store.branch_info(regenerated.id) == (2, 2)
    finally:
        store.close()
    store = ChatStore(tmp_path)  # once: a later start reads only the store
    try:
        assert store.get_chat(2).settings.thinking is True and store.get_chat(1).settings.tool_first is True
        assert [m.content for m in store.messages(1)][-1] == "Five minutes."
        assert json.loads((tmp_path / "mcp-servers.json").read_text(encoding="utf-8")) == OTHER_KEYS
    finally:
        store.close()


def test_an_unreadable_switches_file_is_left_alone_and_the_store_opens(tmp_path, caplog):
    engine = open_engine(tmp_path / "chats.db")
    migrate.upgrade(engine, "0004_drafted_tokens")
    engine.dispose()
    (tmp_path / "mcp-servers.json").write_text('{"thinking": {"1": tr', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="app.store.legacy_flags"):
        store = ChatStore(tmp_path)
    try:
        assert migrate.current_revision(store.engine) == migrate.HEAD_REVISION
        assert "cannot be read" in caplog.text
        assert (tmp_path / "mcp-servers.json").read_text(encoding="utf-8") == '{"thinking": {"1": tr'
        chat = store.create_chat(ChatSettings(model="m", thinking=False, tool_first=True))
        assert store.get_chat(chat.id).settings == ChatSettings(model="m", thinking=False, tool_first=True)
    finally:
        store.close()


def test_the_chats_mcp_servers_move_from_the_servers_file_into_the_chats_once(tmp_path):
    """A data folder of the release before: each chat's servers, from mcp-servers.json, are in its row and go
    with it (a fork copies them, a delete takes them); the file keeps everything else."""
    engine = open_engine(tmp_path / "chats.db")
    migrate.upgrade(engine, "0008_message_images")
    with engine.begin() as conn:
        for chat_id in (1, 2):
            conn.execute(text(
                "INSERT INTO chats (id, title, created_at, updated_at, model, system_prompt, temperature, top_p)"
                " VALUES (:id, 'Chat', :t, :t, 'm', '', 0.7, 0.95)"
            ), {"id": chat_id, "t": T.format(0)})  # fmt: skip
    engine.dispose()
    kept = {**OTHER_KEYS, "future": {"a key": "a later Hearth may write"}}
    servers = {"1": ["rec"], "2": "not a list", "x": ["rec"]}
    (tmp_path / "mcp-servers.json").write_text(json.dumps({**kept, "chats": servers}), encoding="utf-8")
    store = ChatStore(tmp_path)
    try:
        assert store.get_chat(1).settings.mcp_servers == ("rec",) and store.get_chat(2).settings.mcp_servers == ()
        assert json.loads((tmp_path / "mcp-servers.json").read_text(encoding="utf-8")) == kept
        fork = store.fork_chat(1, store.add_message(1, "user", "Hello").id)
        assert fork.settings.mcp_servers == ("rec",)
        store.delete_chat(1)
    finally:
        store.close()
    (tmp_path / "mcp-servers.json").write_text(json.dumps({**kept, "chats": {str(fork.id): ["other"]}}), encoding="utf-8")
    store = ChatStore(tmp_path)  # once: a later start reads only the store, and leaves the file alone
    try:
        assert store.get_chat(fork.id).settings.mcp_servers == ("rec",) and store.get_chat(1) is None
        assert "chats" in json.loads((tmp_path / "mcp-servers.json").read_text(encoding="utf-8"))
    finally:
        store.close()


def test_chats_recovered_from_an_older_database_keep_their_answers_drafted_tokens(tmp_path):
    """Recovery copies by column name; a column renamed since (drafted_tokens) still arrives."""
    import sqlite3

    from app.store.recovery import copy_chats

    _old_data_folder(tmp_path)
    target = tmp_path / "new" / "chats.db"
    target.parent.mkdir()
    engine = open_engine(target)
    migrate.upgrade(engine)
    engine.dispose()
    connection = sqlite3.connect(target)
    try:
        assert copy_chats(tmp_path / "chats.db", connection).complete
        kept = connection.execute("SELECT content, accepted_draft_tokens FROM messages WHERE role = 'assistant'").fetchall()
        assert sorted(kept) == [("Drip, for a crowd.", 2), ("Four to five minutes.", 2), ("Three minutes at 80 C.", 2)]
    finally:
        connection.close()
