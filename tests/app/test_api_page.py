"""The Local API page: sharing the API restarts the worker on the chosen port with the user's key,
and an `openai` client can use it while the app keeps working with its own token."""

from __future__ import annotations

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

    page.apply_button.click()
    qtbot.waitUntil(lambda: engine.state.ready and engine.config.expose, timeout=120_000)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model=STARTER_NAME, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
        )
        assert reply.choices[0].message.content
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list()
        assert window.api_page.settings_store.load().port == port  # remembered for the next launch

        window.nav.select(0)  # the app itself still talks to the worker with its own token
        fresh_chat(window, max_tokens=8)
        assert send_and_wait(qtbot, window, "Hello again.").error is None
        window.nav.select(3)  # live numbers are polled while the page is shown
        qtbot.waitUntil(lambda: "requests in flight" in page.live.text() and "requests served" in page.status.text(), timeout=10_000)
        assert f"{STARTER_NAME} (llamacpp" in page.loaded.text()
    finally:
        page.expose.setChecked(False)
        page.apply_button.click()
        qtbot.waitUntil(lambda: engine.state.ready and not engine.config.expose, timeout=120_000)
