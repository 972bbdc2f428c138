"""The agent in the real window (offscreen) with a real worker and a real MCP server: mcp.json import,
tools switched per server, servers enabled per chat, the approval dialog (once, always, deny), the
call cards, Stop mid-loop, a server that crashes, and the thinking section."""

from __future__ import annotations

import json
import sys

import pytest

from app.agent.widgets import ToolCallCard
from app.chat.preparers import AnswerRequest, ChatRequestBody
from app.store.records import AnswerSteps
from engine.agent import AgentEvent
from tests.app.conftest import ANSWER_TIMEOUT_MS
from tests.app.helpers import bubbles, fresh_chat, type_and_send
from tests.engine.agent.conftest import SERVER, CallLog

ALL = ("lookup", "wait", "slow_lookup", "crash")


@pytest.fixture
def recorder(tmp_path):
    """An mcp.json naming the recorder server (its own name per test), and its call log."""
    log = CallLog(tmp_path / "calls.jsonl")
    name = f"rec{tmp_path.name[-6:].replace('_', '')}"
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {name: {
        "command": sys.executable, "args": [str(SERVER), "stdio"], "env": {"HEARTH_TEST_MCP_LOG": str(log.path)},
    }}}))  # fmt: skip
    return name, path, log


@pytest.fixture(autouse=True)
def close_agent(window):
    """Each test's window ends its MCP servers (the shared window fixture does not close it)."""
    yield
    window.agent.close()


def setup_chat(qtbot, window, recorder, *keep: str) -> int:
    """A fresh chat using the recorder with only ``keep`` tools on, a tool call required first."""
    name, path, _log = recorder
    chat_id = fresh_chat(window, max_tokens=40, temperature=0)  # room for the forced call's JSON
    dialog = window.tools.open_servers()
    assert [s.name for s in dialog.import_file(str(path))] == [name]
    agent = window.agent
    config = agent.servers.get(name)
    for tool in ALL:
        config = config.with_tool(tool, tool in keep)
    agent.servers.save(config)
    dialog.refresh()
    dialog.set_used(name, True)  # the check box of the server in this chat
    dialog.tool_first.setChecked(True)
    dialog.close()
    settings = window.store.get_chat(chat_id).settings
    assert settings.mcp_servers == (name,) and settings.tool_first  # kept with the chat
    assert window.tools.tools_button.text() == "Tools (1)"
    return chat_id


def wait_dialog(qtbot, window):
    ui = window.tools
    try:
        qtbot.waitUntil(lambda: ui.approval_dialog is not None, timeout=ANSWER_TIMEOUT_MS * 2)
    except Exception as exc:
        runs = {c: (r.steps, r.text) for c, r in window.controller._runs.items()}
        raise AssertionError(f"no approval asked; runs: {runs}; answering: {window.controller.answering_chats()}") from exc
    return ui.approval_dialog


def prepared(window, chat_id: int) -> AnswerRequest:
    """What the controller's preparers make of an empty request of the chat."""
    chat = window.store.get_chat(chat_id)
    request = AnswerRequest(chat=chat, body=ChatRequestBody.for_chat(chat.settings, []))
    for preparer in window.controller.preparers:
        preparer.prepare(request)
    return request


def cards(window) -> list[ToolCallCard]:
    return bubbles(window)[-1].steps.cards


def test_mcp_json_import_lists_tools_and_switches_them(qtbot, window, recorder):
    name, path, _log = recorder
    chat_id = fresh_chat(window)
    dialog = window.tools.open_servers()
    from PySide6.QtWidgets import QCheckBox

    assert dialog.findChild(QCheckBox, "thinkingSwitch") is None  # thinking is edited with the chat's settings
    switch = window.chats.settings_panel.thinking
    assert switch.isChecked() and "chat_template_kwargs" not in prepared(window, chat_id).body.params()  # the model's own default
    switch.setChecked(False)  # the chat's thinking switch, kept in the chat's settings at once
    request = prepared(window, chat_id)
    assert request.body.params()["chat_template_kwargs"] == {"enable_thinking": False} and request.added == ["Thinking off"]
    assert window.store.get_chat(chat_id).settings.thinking is False
    dialog.import_file(str(path))
    assert name in dialog.server_names()
    bad = path.with_name("bad.json")
    bad.write_text('{"mcpServers": {"x": {}}}')
    assert dialog.import_file(str(bad)) == []
    assert "needs either a command" in dialog.status.text()
    dialog.servers.setCurrentRow(dialog.server_names().index(name))
    dialog.list_tools()
    qtbot.waitUntil(lambda: dialog.tools.count() == len(ALL), timeout=60_000)
    item = next(dialog.tools.item(i) for i in range(dialog.tools.count()) if dialog.tools.item(i).text().startswith("crash"))
    from PySide6.QtCore import Qt

    item.setCheckState(Qt.CheckState.Unchecked)
    assert window.agent.servers.get(name).disabled_tools == frozenset({"crash"})
    window.agent.servers.set_always_allowed(f"{name}/lookup", True)
    dialog.refresh()
    allowed = [dialog.always.item(i).text() for i in range(dialog.always.count())]  # other tests' too, in any order
    dialog.always.setCurrentRow(allowed.index(f"{name}/lookup"))
    dialog.revoke_button.click()
    assert f"{name}/lookup" not in window.agent.servers.always_allowed()
    dialog.close()


def test_approval_once_always_and_deny_with_call_cards(qtbot, window, store, recorder):
    name, _path, log = recorder
    chat_id = setup_chat(qtbot, window, recorder, "lookup")
    # Allow once: the call runs, its card shows tool, arguments, result and duration
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS * 3) as done:
        type_and_send(qtbot, window, "What does the word cat mean? Look it up.")
        dialog = wait_dialog(qtbot, window)
        assert dialog.windowTitle() == "Allow this tool call?"
        dialog.once.click()
    assert done.args[0].error is None
    first = cards(window)[0]
    assert first.call["status"] == "done" and first.call["name"] == "lookup"
    assert "small domestic animal" in first.result.toPlainText()
    assert "<b>bold</b>" in first.result.toPlainText()  # untrusted text is shown as text, not HTML
    assert " ms" in first.header.text() and name in first.header.text()
    assert len(log.calls()) >= 1
    assert f"{name}/lookup" not in window.agent.servers.always_allowed()
    # the steps are kept with the answer, in the chat store
    answer_id = store.messages(chat_id)[-1].id
    assert store.steps(answer_id).calls[0]["status"] == "done"

    # Always allow: asked this time, never again (each step in a chat of its own: short prompts)
    setup_chat(qtbot, window, recorder, "lookup")
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS * 3):
        type_and_send(qtbot, window, "And the word dog?")
        wait_dialog(qtbot, window).always.click()
    assert f"{name}/lookup" in window.agent.servers.always_allowed()
    setup_chat(qtbot, window, recorder, "lookup")
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS * 3):
        type_and_send(qtbot, window, "And the word bird?")
        qtbot.waitUntil(lambda: bool(cards(window)) and cards(window)[0].call["status"] != "pending",
                        timeout=ANSWER_TIMEOUT_MS)  # fmt: skip
        assert window.tools.approval_dialog is None
    assert cards(window)[0].call["status"] == "done"

    # Deny (after revoking "always" in the settings): the model is told, the server never sees it
    window.agent.servers.set_always_allowed(f"{name}/lookup", False)
    before = len(log.calls())
    setup_chat(qtbot, window, recorder, "lookup")
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS * 3):
        type_and_send(qtbot, window, "And the word fish?")
        wait_dialog(qtbot, window).deny.click()
    denied = cards(window)[0]
    assert denied.call["status"] == "denied" and "denied" in denied.result.toPlainText()
    assert len(log.calls()) == before


def test_stop_mid_loop_then_a_server_that_crashes(qtbot, window, store, recorder):
    name, _path, log = recorder
    chat_id = setup_chat(qtbot, window, recorder, "slow_lookup")
    window.agent.servers.set_always_allowed(f"{name}/slow_lookup", True)
    type_and_send(qtbot, window, "Look up the word cat in the big dictionary.")
    fail = window.controller.answer_finished
    fail.connect(lambda o: pytest.fail(f"the answer ended before Stop: {o.message.stats}"))
    # the server has the call and the window shows it running: two sides, either may come first
    qtbot.waitUntil(lambda: bool(log.calls()) and bool(cards(window)) and cards(window)[0].call["status"] == "running",
                    timeout=ANSWER_TIMEOUT_MS * 2)  # fmt: skip
    fail.disconnect()
    with qtbot.waitSignal(window.controller.answer_finished, timeout=30_000) as done:
        window.chats.composer.button.click()  # Stop
    assert done.args[0].message.stats.finish_reason == "cancelled"
    assert cards(window)[0].call["status"] == "cancelled"
    assert [c["tool"] for c in log.calls()] == ["slow_lookup"]  # it never finished
    kept = store.steps(store.messages(chat_id)[-1].id)
    assert kept is not None and kept.calls[0]["name"] == "slow_lookup"

    # the same server, now with only its crash tool: the crash is shown with its stderr, the chat goes on
    config = window.agent.servers.get(name)
    for tool in ALL:
        config = config.with_tool(tool, tool == "crash")
    window.agent.servers.save(config)
    window.agent.servers.set_always_allowed(f"{name}/crash", True)
    setup_chat(qtbot, window, recorder, "crash")
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS * 3) as done:
        type_and_send(qtbot, window, "Please crash.")
    assert done.args[0].error is None
    steps = bubbles(window)[-1].steps
    assert steps.cards[0].call["status"] == "error" and "stopped" in steps.cards[0].call["result"]
    notices = [n.text() for n in steps.notices]
    assert any(name in n and "crashing on purpose" in n for n in notices)


def test_thinking_streams_then_folds_when_the_answer_starts(qtbot, window, store, tmp_path):
    """The agent loop's events, through its producer, into one answer run and the view."""
    chat_id = fresh_chat(window)
    from app.agent.agent_producer import AgentProducer
    from app.chat.answer_run import AnswerRun
    from app.store.records import AnswerStats

    chat = store.get_chat(chat_id)
    store.add_message(chat_id, "user", "Why is the sky blue?")
    answer = store.add_message(chat_id, "assistant", "", AnswerStats(model=chat.settings.model))
    conversation = window.controller.conversation(chat_id)
    conversation.append(store.messages(chat_id)[0])
    conversation.append(answer, streaming=True)
    run = AnswerRun(api=window.api, store=store, conversation=conversation, chat=chat, answer=answer,
                    history=[], context_length=2048, parent=window)  # fmt: skip
    producer = run.attach(AgentProducer(window.agent, window.tools.preparer.client, chat_id, servers=()))
    run.steps_changed.connect(lambda _mid: bubbles(window)[-1].show_steps(run.kept_steps()))
    thinking = bubbles(window)[-1].steps.thinking
    for piece in ("Light is ", "scattered by ", "the air."):  # a stream's thinking deltas
        producer._on_event(AgentEvent("thinking", text=piece))
    assert not bubbles(window)[-1].steps.isHidden() and not thinking.isHidden() and not thinking.body.isHidden()
    assert thinking.body.text() == "Light is scattered by the air." and "Thinking" in thinking.toggle.text()
    producer._on_event(AgentEvent("content", text="Because of Rayleigh scattering."))
    assert thinking.body.isHidden()  # folded when the answer started
    assert thinking.toggle.text().startswith("▸ Thought for ") and "3 tokens" in thinking.toggle.text()
    thinking.toggle.click()
    assert not thinking.body.isHidden() and thinking.toggle.text().startswith("▾")
    store.save_steps(answer.id, run.steps)
    # kept with the chat: a new view of it shows the thinking folded
    again = store.steps(answer.id)
    assert isinstance(again, AnswerSteps) and again.reasoning == "Light is scattered by the air." and again.thinking_done
    # exported with the chat: the thinking, and the calls with their results
    run.steps.calls.append({"id": "call_1", "name": "lookup", "arguments": '{"word": "sky"}', "server": "rec",
                            "tool": "lookup", "status": "done", "result": "blue", "duration": 0.01, "round": 1})
    store.save_steps(answer.id, run.steps)
    store.update_message(answer.id, "Because of Rayleigh scattering.", AnswerStats(model=chat.settings.model))
    window.controller._conversations.pop(chat_id, None)  # read back from the store
    window.chats.open_chat(chat_id)
    md, js = tmp_path / "chat.md", tmp_path / "chat.json"
    window.chats.write_export(chat_id, md, "md")
    window.chats.write_export(chat_id, js, "json")
    text = md.read_text()
    assert "> Light is scattered by the air." in text and "`lookup`" in text
    assert text.index("Light is scattered") < text.index("Because of Rayleigh")
    exported = json.loads(js.read_text())["messages"][-1]
    assert exported["steps"]["reasoning"] == "Light is scattered by the air."
    assert exported["steps"]["calls"][0]["result"] == "blue"


def test_a_plain_answer_shows_the_thinking_of_its_stream(qtbot, window, store):
    """The thinking of a chat without tools: ChatStream's reasoning deltas (an SSE stream fed to it
    piece by piece, `reasoning_content` split across events) fold above the answer and are kept."""
    from app.chat.answer_run import AnswerRun
    from app.net.chat_stream import ChatStream
    from app.store.records import AnswerStats

    chat_id = fresh_chat(window)
    chat = store.get_chat(chat_id)
    store.add_message(chat_id, "user", "Is 7 prime?")
    answer = store.add_message(chat_id, "assistant", "", AnswerStats(model=chat.settings.model))
    conversation = window.controller.conversation(chat_id)
    conversation.append(store.messages(chat_id)[0])
    conversation.append(answer, streaming=True)
    run = AnswerRun(api=window.api, store=store, conversation=conversation, chat=chat, answer=answer,
                    history=[], context_length=2048, parent=window)  # fmt: skip
    run.steps_changed.connect(lambda _mid: bubbles(window)[-1].show_steps(run.kept_steps()))
    stream = ChatStream(window.api.nam, window.api.request("/v1/chat/completions", streaming=True), {}, window)
    stream.reasoning.connect(run._on_reasoning)
    stream.delta.connect(run._on_content)
    events = [{"reasoning_content": "Seven has no "}, {"reasoning_content": "divisors but 1 and 7."},
              {"content": "Yes, 7 is prime."}]  # fmt: skip
    thinking = bubbles(window)[-1].steps.thinking
    for i, delta in enumerate(events):
        raw = "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}) + "\n\n"
        for payload in stream._parser.feed(raw.encode()):
            text = stream._event(payload)
            if text:
                stream.delta.emit(text)
        if i == 1:
            assert not thinking.isHidden() and not thinking.body.isHidden()
            assert thinking.body.text() == "Seven has no divisors but 1 and 7."
    assert thinking.body.isHidden() and thinking.toggle.text().startswith("▸ Thought for ")
    run._finish(AnswerStats(model=chat.settings.model, finish_reason="stop"), None)
    kept = store.steps(answer.id)
    assert kept is not None and kept.reasoning == "Seven has no divisors but 1 and 7." and kept.thinking_done
    # the next question sends it back with its answer; the engine keeps it only for templates that ask
    store.add_message(chat_id, "user", "And 9?")
    history = store.messages(chat_id)
    follow = AnswerRun(api=window.api, store=store, conversation=conversation, chat=chat,
                       answer=store.add_message(chat_id, "assistant", "", AnswerStats(model=chat.settings.model)),
                       history=history, context_length=2048, parent=window)  # fmt: skip
    with qtbot.waitSignal(follow.finished, timeout=30_000):
        follow.start()
        follow.stop()
    assert follow.fit is not None and follow.fit.messages[1] == {
        "role": "assistant", "content": "Yes, 7 is prime.", "reasoning_content": "Seven has no divisors but 1 and 7.",
    }  # fmt: skip
    assert "reasoning_content" not in follow.fit.messages[2]


def test_a_server_that_dies_while_idle_is_shown_with_its_stderr_and_the_chat_goes_on(qtbot, window, store, recorder, tmp_path):
    name, path, _log = recorder
    trigger = tmp_path / "exit-now"  # the recorder exits on its own once this exists
    data = json.loads(path.read_text())
    data["mcpServers"][name]["env"]["HEARTH_TEST_MCP_EXIT_FILE"] = str(trigger)
    path.write_text(json.dumps(data))
    chat_id = setup_chat(qtbot, window, recorder, "lookup")
    agent, ui = window.agent, window.tools
    agent.runtime.call(agent.hub_for(chat_id, (name,)), timeout=60)  # the chat's servers, as its answers start them
    qtbot.waitUntil(lambda: agent.failures(chat_id) == [] and ui.server_notice.isHidden(), timeout=10_000)
    trigger.touch()  # no answer is running, no call is made
    qtbot.waitUntil(lambda: not ui.server_notice.isHidden(), timeout=30_000)
    said = ui.server_notice.text()
    assert f"MCP server {name} stopped: it exited" in said and "exiting on its own, the disk is gone" in said
    assert ui.tools_button.text() == "Tools (1, 1 stopped)"
    dialog = ui.open_servers()
    item = dialog.servers.item(dialog.server_names().index(name))
    assert "stopped: it exited" in item.text() and "exiting on its own" in item.toolTip()
    dialog.servers.setCurrentRow(dialog.server_names().index(name))
    assert "exiting on its own" in dialog.status.text()
    dialog.close()
    # the next message starts it again; it exits at once, and the model answers without its tools
    with qtbot.waitSignal(window.controller.answer_finished, timeout=ANSWER_TIMEOUT_MS * 2) as done:
        type_and_send(qtbot, window, "Say hello.")
    assert done.args[0].error is None and done.args[0].message.stats.finish_reason in ("stop", "length")
    steps = bubbles(window)[-1].steps
    assert steps.cards == [] and any(name in n.text() and "exiting on its own" in n.text() for n in steps.notices)
    assert not ui.server_notice.isHidden()


def test_an_mcp_json_that_replaces_a_server_asks_first_and_clears_its_approvals(qtbot, window, recorder, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    name, path, _log = recorder
    dialog = window.tools.open_servers()
    dialog.import_file(str(path))
    window.agent.servers.set_always_allowed(f"{name}/lookup", True)
    other = path.with_name("other.json")
    other.write_text(json.dumps({"mcpServers": {name: {"command": sys.executable, "args": ["-c", "pass"]}}}))
    asked = []

    def answer(button):
        def question(parent, title, text, *args):
            asked.append(text)
            return button

        return question

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.No))
    assert dialog.import_file(str(other)) == []
    assert name in asked[0] and "Nothing was imported" in dialog.status.text()
    assert window.agent.servers.get(name).args[0] == str(SERVER)
    assert f"{name}/lookup" in window.agent.servers.always_allowed()

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Yes))
    assert [s.name for s in dialog.import_file(str(other))] == [name]
    assert len(asked) == 2 and window.agent.servers.get(name).args == ("-c", "pass")
    assert f"{name}/lookup" not in window.agent.servers.always_allowed()
    assert f"{name}/lookup" not in [dialog.always.item(i).text() for i in range(dialog.always.count())]
    dialog.close()
