"""The app with a remote provider: added on the Models page, its models in the chat's model picker
marked with the provider, a chat with one streamed through the worker like a local one (tokens/s
and time to first token under the answer), a wrong key named in the chat, and removal."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.app.conftest import (  # theme is a fixture
    ANSWER_TIMEOUT_MS,
    WORKER_ARGS,
    open_window,
    start_engine,
    theme,  # noqa: F401 - a fixture
)
from tests.app.helpers import bubbles, fresh_chat, send_and_wait
from tests.engine.fit.speed_figures import keep_figures
from tests.remote.conftest import ALIAS, LLAMA_KEY, NO_KEYRING

PUBLIC = f"cluster/{ALIAS}"


@pytest.fixture(scope="module")
def remote_engine(qapp, tmp_path_factory):
    """The app's worker, with a data folder of its own (its providers are this module's)."""
    from app.net.engine import EngineConfig

    home = tmp_path_factory.mktemp("app-worker-home")
    keep_figures(home)
    env = (("HEARTH_HOME", str(home)), *NO_KEYRING.items())
    controller = start_engine(EngineConfig(extra_args=WORKER_ARGS, env=env), home / "worker.log")
    yield controller
    controller.stop()


@pytest.fixture(scope="module")
def remote_store(tmp_path_factory):
    """The chats of this module: its removed providers' models stay out of the other tests' chats."""
    from app.store import ChatStore

    chats = ChatStore(tmp_path_factory.mktemp("app-remote-chats"))
    yield chats
    chats.close()


@pytest.fixture
def window(qtbot, remote_store, remote_engine, theme):  # noqa: F811
    win = open_window(qtbot, remote_store, remote_engine, theme)
    yield win
    win.controller.stop_all()
    qtbot.waitUntil(lambda: not win.controller.answering_chats(), timeout=10_000)


def add_on_the_page(qtbot, window, name: str, url: str, key: str):
    panel = window.models_page.remote
    panel.name.setText(name)
    panel.url.setText(url)
    panel.key.setText(key)
    panel.add_button.click()
    qtbot.waitUntil(lambda: panel.table.get(name) is not None, timeout=30_000)
    return panel.table.get(name)


def test_a_remote_provider_from_the_models_page_to_a_streamed_chat(qtbot, window, llama_server):
    from PySide6.QtWidgets import QMessageBox

    window.nav.select(1)
    page = window.models_page
    page.tabs.setCurrentWidget(page.remote)

    wrong = add_on_the_page(qtbot, window, "wrongkey", llama_server.base_url, "not-the-key")
    assert wrong.state == "refused" and wrong.key == "file"
    assert "'wrongkey'" in page.message.text() and "refused the API key" in page.message.text()

    cluster = add_on_the_page(qtbot, window, "cluster", llama_server.base_url, LLAMA_KEY)
    assert cluster.state == "ok" and [m.id for m in cluster.models] == [PUBLIC]
    assert page.remote.key.text() == ""  # the key does not linger in the form
    assert "Added cluster: 1 model ready" in page.message.text()

    # The chat's picker offers the remote model, marked with its provider.
    window.nav.select(0)
    chats = window.chats
    chat_id = fresh_chat(window, max_tokens=12, temperature=0)
    combo = chats.model_combo
    qtbot.waitUntil(lambda: combo.findData(PUBLIC) >= 0, timeout=10_000)
    index = combo.findData(PUBLIC)
    assert combo.itemText(index) == f"{ALIAS} — cluster"
    combo.setCurrentIndex(index)
    combo.activated.emit(index)
    assert window.store.get_chat(chat_id).settings.model == PUBLIC
    assert "running on <b>cluster</b>" in chats.view.empty.text()

    # It streams through the worker like a local model, with the same numbers under the answer.
    outcome = send_and_wait(qtbot, window, "Name three colours.")
    assert outcome.error is None, outcome.error
    answer = outcome.message
    assert answer.content.strip() and answer.stats.model == PUBLIC
    assert answer.stats.tokens > 1 and answer.stats.ttft is not None and answer.stats.tokens_per_second
    footer = bubbles(window)[-1].stats.text()
    assert "tok/s" in footer and "first token" in footer

    # A new chat from this one keeps its remote model (it is not taken for a model that is gone).
    chats.new_chat()
    assert chats.chat_id != chat_id and window.store.get_chat(chats.chat_id).settings.model == PUBLIC
    chats.open_chat(chat_id)

    # A provider that refuses its key is named in the chat, not taken for the app's own key.
    settings = window.store.get_chat(chat_id).settings
    window.controller.update_settings(chat_id, replace(settings, model=f"wrongkey/{ALIAS}"))
    outcome = send_and_wait(qtbot, window, "Hello?")
    assert outcome.error is not None and outcome.error.status == 401
    assert outcome.error.message.startswith("The remote provider 'wrongkey'")
    assert "refused the API key" in outcome.error.message

    # Removing a provider takes its models out of the picker.
    window.nav.select(1)
    panel = page.remote
    for name in ("cluster", "wrongkey"):
        panel.view.selectRow(panel.table.names().index(name))
        panel.remove_button.click()
        box = next(w for w in panel.findChildren(QMessageBox) if w.isVisible())
        box.button(QMessageBox.StandardButton.Yes).click()
        qtbot.waitUntil(lambda n=name: n not in panel.table.names(), timeout=ANSWER_TIMEOUT_MS)
    window.nav.select(0)
    chats.open_chat(chat_id)
    assert combo.findData(PUBLIC) < 0


def test_a_chat_side_by_side_with_a_local_and_a_remote_model(qtbot, window, llama_server):
    """Split: each message goes to the chat's local model and to a provider's, the answers stream in two
    columns with their own numbers, and the split is still there when the chat is opened again."""
    window.nav.select(1)
    side = add_on_the_page(qtbot, window, "side", llama_server.base_url, LLAMA_KEY)
    assert side.state == "ok"
    remote = f"side/{ALIAS}"
    window.nav.select(0)
    chats = window.chats
    chat_id = fresh_chat(window, max_tokens=8, temperature=0)
    local = window.store.get_chat(chat_id).settings.model
    qtbot.waitUntil(lambda: chats.model_combo.findData(remote) >= 0, timeout=10_000)

    chats.split_button.click()
    companion_id = chats.split_chat_id
    assert companion_id is not None and chats.split_column.isVisible()
    combo = chats.split_column.model_combo
    index = combo.findData(remote)
    combo.setCurrentIndex(index)
    combo.activated.emit(index)
    assert window.store.get_chat(companion_id).settings.model == remote
    assert [c.id for c in window.store.list_chats()].count(companion_id) == 0  # one chat in the list

    finished = []
    window.controller.answer_finished.connect(finished.append)
    chats.composer.input.setPlainText("Name three colours.")
    chats.composer.button.click()
    assert chats.composer.answering
    qtbot.waitUntil(lambda: len(finished) == 2, timeout=ANSWER_TIMEOUT_MS)
    window.controller.answer_finished.disconnect(finished.append)
    by_chat = {o.chat_id: o for o in finished}
    assert set(by_chat) == {chat_id, companion_id} and all(o.error is None for o in finished)
    assert by_chat[chat_id].message.stats.model == local and by_chat[companion_id].message.stats.model == remote
    for view in (chats.view, chats.split_column.view):
        question, answer = view.bubbles
        assert question.message.content == "Name three colours." and answer.message.content.strip()
        footer = answer.stats.text()
        assert "tok/s" in footer and "first token" in footer  # each column measures its own answer
    assert not chats.composer.answering

    # opened again: still split, with the same model beside it; unsplit, the column is a chat of its own
    chats.new_chat()
    assert not chats.split_column.isVisible()
    chats.open_chat(chat_id)
    assert chats.split_chat_id == companion_id and combo.currentData() == remote
    chats.split_button.click()
    assert chats.split_chat_id is None and not chats.split_column.isVisible()
    assert companion_id in [c.id for c in window.store.list_chats()]
