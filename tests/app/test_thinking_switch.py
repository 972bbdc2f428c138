"""The chat settings offer "Let the model think first" only for a model whose chat template can think (the
worker lists "thinking" among its capabilities)."""

from __future__ import annotations

from app.net.types import ModelInfo
from engine.starter import STARTER_NAME
from tests.app.helpers import fresh_chat


def test_the_thinking_switch_is_offered_only_for_a_model_that_thinks(qtbot, window):
    qtbot.waitUntil(lambda: window.models.get(STARTER_NAME) is not None, timeout=10_000)
    fresh_chat(window)
    page = window.chats
    page.settings_button.setChecked(True)  # the settings panel open
    switch = page.settings_panel.thinking
    starter = window.models.get(STARTER_NAME)
    # SmolLM2's template has no thinking
    assert starter is not None and "thinking" not in starter.capabilities
    assert not switch.isVisible()

    thinker = ModelInfo(name="a-thinking-model", capabilities=["thinking"])
    window.models._loaded([*window.models.models, thinker])  # as if the worker listed one more
    index = page.model_combo.findData(thinker.name)
    page.model_combo.setCurrentIndex(index)
    page.model_combo.activated.emit(index)  # the user picks it
    assert switch.isVisible()

    index = page.model_combo.findData(STARTER_NAME)
    page.model_combo.setCurrentIndex(index)
    page.model_combo.activated.emit(index)
    assert not switch.isVisible()
    page.settings_button.setChecked(False)
