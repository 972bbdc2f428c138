"""The Local API page: sharing the API restarts the worker on the chosen port with the user's key,
and an `openai` client can use it while the app keeps working with its own token."""

from __future__ import annotations

import httpx
import openai
import pytest

from engine.starter import STARTER_NAME
from engine.worker.supervisor import free_port
from tests.app.helpers import fresh_chat, send_and_wait

KEY = "sk-test-hearth-key"


def test_sharing_the_api_lets_an_openai_client_in(qtbot, window, engine):
    page = window.api_page
    window.nav.select(3)
    port = free_port()
    page.expose.setChecked(True)
    page.port.setValue(port)
    page.key.setText(KEY)
    assert page.apply_button.isEnabled()
    assert f"http://127.0.0.1:{port}/v1" in page.curl.toPlainText() and KEY in page.curl.toPlainText()

    theme = window.settings_store.load().theme
    window.choose_theme("dark")  # saved by another page while this one is open: Apply keeps it
    page.apply_button.click()
    qtbot.waitUntil(lambda: engine.state.ready and engine.config.expose, timeout=120_000)
    try:
        assert window.settings_store.load().theme == "dark"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model=STARTER_NAME, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0
        )
        assert reply.choices[0].message.content
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list()
        # The user's key only runs models; the app's own token is the admin key.
        admin = httpx.get(f"http://127.0.0.1:{port}/api/models", headers={"Authorization": f"Bearer {KEY}"})
        assert admin.status_code == 403 and "admin key" in admin.json()["error"]["message"]
        assert httpx.get(f"http://127.0.0.1:{port}/api/models", headers={"Authorization": f"Bearer {engine.token}"}).status_code == 200
        assert window.api_page.settings_store.load().port == port  # remembered for the next launch

        window.nav.select(0)  # the app itself still talks to the worker with its own token
        fresh_chat(window, max_tokens=8)
        assert send_and_wait(qtbot, window, "Hello again.").error is None
        window.nav.select(3)  # live numbers are polled while the page is shown
        qtbot.waitUntil(lambda: " in flight" in page.live.text() and " served" in page.status.text(), timeout=10_000)
        assert f"{STARTER_NAME} (llamacpp" in page.loaded.text()
    finally:
        window.choose_theme(theme)
        page.expose.setChecked(False)
        page.apply_button.click()
        qtbot.waitUntil(lambda: engine.state.ready and not engine.config.expose, timeout=120_000)


def test_the_page_lists_the_other_dialects_with_examples_to_copy(qtbot, window):
    from PySide6.QtGui import QGuiApplication

    page = window.api_page
    page.port.setValue(18111)
    page.key.setText(KEY)
    titles = [title.text() for title, _, _ in page.dialects]
    assert [t.split("</b>")[0] for t in titles] == [
        "<b>Anthropic Messages (/v1/messages)", "<b>OpenAI Responses (/v1/responses)", "<b>Ollama (/api/chat, /api/tags, ...)"
    ]  # fmt: skip
    assert "Claude Code" in titles[0] and "Codex" in titles[1] and "Open WebUI" in titles[2]
    examples = [box.toPlainText() for _, box, _ in page.dialects]
    assert all("http://127.0.0.1:18111/" in e and KEY in e for e in examples)
    page.dialects[2][2].click()
    assert QGuiApplication.clipboard().text() == examples[2]
    page.key.setText("")
    assert all(KEY not in box.toPlainText() for _, box, _ in page.dialects)
    page.load(page.settings_store.load())  # leave the page as it was
