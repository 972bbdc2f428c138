"""Branches in the real window with a real worker: regenerating and editing keep the earlier versions
(‹ 2/3 › under a message switches, and the conversation below follows), exports carry them, a restart
keeps them, and "Fork chat from here" copies a conversation up to a message."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QMessageBox

from tests.app.conftest import ANSWER_TIMEOUT_MS
from tests.app.helpers import bubbles, fresh_chat, send_and_wait


def regenerate(qtbot, window) -> None:
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS):
        bubbles(window)[-1].regenerate_button.click()


def shown(window) -> list[tuple[str, str, str]]:
    """Each bubble's role, text and branch switcher ('' when the message has one version)."""
    out = []
    for b in bubbles(window):
        out.append((b.message.role, b.message.content, b.branch_label.text() if not b.branch.isHidden() else ""))
    return out


def test_branches_by_regenerate_and_edit_switch_export_and_survive_a_restart(qtbot, window, tmp_path, monkeypatch):
    chat_id = fresh_chat(window, max_tokens=6)
    send_and_wait(qtbot, window, "Name a colour.")
    first = bubbles(window)[-1].message
    regenerate(qtbot, window)
    regenerate(qtbot, window)
    answers = window.store.siblings(first.id)
    assert len(answers) == 3 and len(bubbles(window)) == 2
    assert shown(window)[-1][2] == "3/3" and bubbles(window)[-1].message.id == answers[2]

    # ‹ goes to the second version, then the first; the bubble shows that answer's text
    bubbles(window)[-1].previous_branch.click()
    assert shown(window)[-1][2] == "2/3" and bubbles(window)[-1].message.id == answers[1]
    bubbles(window)[-1].previous_branch.click()
    assert shown(window)[-1][2] == "1/3" and bubbles(window)[-1].message.content == first.content
    assert not bubbles(window)[-1].previous_branch.isEnabled() and bubbles(window)[-1].next_branch.isEnabled()

    # a follow-up on the first answer, then the question edited: a new branch with its own answer
    send_and_wait(qtbot, window, "And another?")
    assert [r for r, _t, _b in shown(window)] == ["user", "assistant", "user", "assistant"]
    question = bubbles(window)[0]
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS):
        question.edit_submitted.emit(question.message.id, "Name a fruit.")
    assert shown(window)[0][1:] == ("Name a fruit.", "2/2") and len(bubbles(window)) == 2
    # back to the first question: its branch comes back as it was left (answer 1/3 and the follow-up)
    bubbles(window)[0].previous_branch.click()
    assert [(r, b) for r, _t, b in shown(window)] == [("user", "1/2"), ("assistant", "1/3"), ("user", ""), ("assistant", "")]
    assert shown(window)[0][1] == "Name a colour." and shown(window)[2][1] == "And another?"

    # exports: JSON has every version with its parent, Markdown the branch shown
    md, js = tmp_path / "chat.md", tmp_path / "chat.json"
    window.chats.write_export(chat_id, md, "md")
    window.chats.write_export(chat_id, js, "json")
    data = json.loads(js.read_text())
    assert len(data["messages"]) == 8  # the question, 3 answers, a follow-up and its answer, the edit and its answer
    by_id = {m["id"]: m for m in data["messages"]}
    assert {by_id[a]["parent_id"] for a in answers} == {bubbles(window)[0].message.id}
    assert data["active_leaf_id"] == bubbles(window)[-1].message.id
    text = md.read_text()
    assert "Name a colour." in text and "Name a fruit." not in text and "And another?" in text

    # a restart: a new store and window on the same data folder show the same branch with its switchers
    from app.store import ChatStore
    from tests.app.conftest import open_window

    before = shown(window)
    store = ChatStore(window.store.path.parent)
    try:
        again = open_window(qtbot, store, window.engine, window.theme)
        again.chats.sidebar.chat_selected.emit(chat_id)
        assert shown(again) == before
        again.close()
    finally:
        store.close()

    # fork from the first answer: a new chat with the question and that answer, opened
    monkeypatch.setattr(QMessageBox, "warning", lambda *a: None)
    bubbles(window)[1].fork_button.click()
    fork_id = window.chats.chat_id
    assert fork_id != chat_id and window.store.get_chat(fork_id).title.endswith("(fork)")
    assert [(r, t) for r, t, _b in shown(window)] == [(r, t) for r, t, _b in before[:2]]
    assert all(b == "" for _r, _t, b in shown(window))  # the fork holds one version of each
    window.chats.sidebar.chat_selected.emit(chat_id)
    assert shown(window) == before  # the original is untouched
