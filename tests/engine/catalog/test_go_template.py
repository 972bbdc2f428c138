"""Ollama's Go chat templates translated to Jinja: each form renders what Ollama would send the model."""

from __future__ import annotations

import pytest

from engine.catalog.go_template import MAX_TEMPLATE_CHARS, UnsupportedTemplate, translate
from engine.chat_template import ChatTemplate
from engine.types import ChatMessage

CONVERSATION = (
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Hi"),
    ChatMessage("assistant", "Hello!"),
    ChatMessage("user", "A joke?"),
)
CHATML = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    "<|im_start|>user\nA joke?<|im_end|>\n<|im_start|>assistant\n"
)


def render(go: str, messages=CONVERSATION, *, default_system: str | None = None) -> str:
    return ChatTemplate(translate(go, default_system=default_system).jinja).render(messages)


def test_a_messages_template_with_trimming():
    go = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
    assert translate(go).uses_messages
    assert render(go) == CHATML


def test_the_system_layer_is_the_default_system_message():
    go = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
    without_system = CONVERSATION[1:]
    assert render(go, without_system, default_system="Be brief.") == CHATML
    # a conversation's own system message wins
    own = (ChatMessage("system", "Be brief."), *without_system)
    assert render(go, own, default_system="Talk like a pirate.") == CHATML


def test_a_legacy_prompt_response_template_runs_per_turn_and_is_cut_after_the_response():
    go = (
        "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
        "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}"
        "<|im_start|>assistant\n{{ .Response }}<|im_end|>\n"
    )
    assert not translate(go).uses_messages
    assert render(go) == CHATML


def test_qwen_style_tools_and_last_message_logic():
    go = (
        "{{- if .Messages }}\n{{- if or .System .Tools }}<|im_start|>system\n{{- if .System }}\n{{ .System }}\n{{- end }}"
        "\n{{- if .Tools }}\n<tools>\n{{- range .Tools }}\n{{ .Function }}\n{{- end }}\n</tools>\n{{- end }}<|im_end|>\n{{ end }}"
        "\n{{- range $i, $_ := .Messages }}\n{{- $last := eq (len (slice $.Messages $i)) 1 -}}"
        '\n{{- if eq .Role "user" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n'
        '{{ else if eq .Role "assistant" }}<|im_start|>assistant\n{{ if .Content }}{{ .Content }}'
        "{{- else if .ToolCalls }}<tool_call>{{ range .ToolCalls }}{{ .Function.Name }}{{ end }}</tool_call>{{- end }}"
        "{{ if not $last }}<|im_end|>\n{{ end }}"
        '\n{{- end }}\n{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant\n{{ end }}\n{{- end }}'
        "\n{{- else }}{{ .Prompt }}{{ end }}"
    )
    assert render(go) == CHATML
    # the answer being continued is left open ($last)
    assert render(go, (*CONVERSATION, ChatMessage("assistant", "Why"))).endswith("<|im_start|>assistant\nWhy")


def test_go_whitespace_trimming():
    assert render("A  \n{{- range .Messages }}[{{ .Content }}]{{ end -}}\n\n  B", CONVERSATION[1:2]) == "A[Hi]B"


@pytest.mark.parametrize(
    "go",
    [
        '{{ template "x" . }}',
        "{{ with .System }}{{ . }}{{ end }}",
        "{{ .Unknown }}",
        "{{ .System | printf }}",
        "{{ if .System }}never closed",
        "{{ end }}",
        "{{ range .Messages }}{{ .Images }}{{ .Other }}{{ end }}",
        "{{ index .Messages 0 }}",
    ],
)
def test_unknown_forms_are_refused(go):
    with pytest.raises(UnsupportedTemplate):
        translate(go)


def test_input_size_is_bounded():
    with pytest.raises(UnsupportedTemplate):
        translate("x" * (MAX_TEMPLATE_CHARS + 1))
    with pytest.raises(UnsupportedTemplate):
        translate("{{ if .System }}" * 40 + "{{ end }}" * 40)


def test_template_text_cannot_inject_jinja():
    go = "{% for x in range(10**9) %}{# c #}{{- range .Messages }}{{ .Content }}{{ end }}"
    assert render(go, CONVERSATION[1:2]) == "{% for x in range(10**9) %}{# c #}Hi"
