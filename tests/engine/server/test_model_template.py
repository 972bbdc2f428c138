"""The worker lists "thinking" among a local model's capabilities where its chat template can think."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.server.model_template import model_thinks
from engine.starter import starter_model_path


@dataclass
class Model:
    path: Path
    format: str = "gguf"
    chat_template: str | None = None


def test_a_template_with_a_thinking_switch_thinks_and_the_starters_does_not():
    starter = starter_model_path()
    assert not model_thinks(Model(starter))  # SmolLM2's template has no thinking
    switch = "{% if enable_thinking %}<think>{% endif %}{{ messages[-1].content }}"
    assert model_thinks(Model(starter, chat_template=switch))  # an Ollama model's translated template wins
    assert not model_thinks(Model(starter.with_name("gone.gguf")))
