"""A chat template is code from a model file: one that recurses, loops or writes without end is a clear
error (a 400 at request time, a load error for the model), never a hung thread or a 500."""

from __future__ import annotations

import pytest

from engine.chat_template import RENDER_MAX_CHARS, ChatTemplate, ChatTemplateTooCostly
from engine.errors import InvalidRequest
from engine.types import ChatMessage

HELLO = (ChatMessage("user", "Hello"),)
RECURSIVE = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def test_a_recursive_macro_is_a_clear_invalid_request():
    with pytest.raises(ChatTemplateTooCostly, match="recursed") as err:
        ChatTemplate(RECURSIVE).render(HELLO)
    assert isinstance(err.value, InvalidRequest)  # the server answers 400


def test_a_huge_loop_is_stopped_by_the_time_budget():
    with pytest.raises(ChatTemplateTooCostly, match="0.2 s"):
        ChatTemplate(NESTED_LOOPS, render_seconds=0.2).render(HELLO)


def test_huge_output_is_stopped_by_the_size_budget():
    with pytest.raises(ChatTemplateTooCostly, match=str(RENDER_MAX_CHARS)):
        ChatTemplate("{{ 'x' * 1000000000 }}").render(HELLO)
    looped = "{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}"  # 10 M characters, 100 at a time
    with pytest.raises(ChatTemplateTooCostly, match=str(RENDER_MAX_CHARS)):
        ChatTemplate(looped).render(HELLO)


def test_the_load_check_refuses_a_runaway_template_and_lets_a_picky_one_through():
    with pytest.raises(ChatTemplateTooCostly):
        ChatTemplate(RECURSIVE).check()
    # refusing a system message is the template's right: requests report it, the load goes on
    picky = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}{% endfor %}"
    ChatTemplate(picky).check()
    ChatTemplate(None).check()


def test_an_ordinary_template_renders_as_before():
    text = ChatTemplate(None).render(HELLO)
    assert text == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
