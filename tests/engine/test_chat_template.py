import pytest

from engine.chat_template import ChatTemplate, ChatTemplateError
from engine.types import ChatMessage

MSGS = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")]


def test_renders_a_real_template_with_bos_and_generation_prompt():
    src = (
        "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    out = ChatTemplate(src, bos_token="<s>").render(MSGS)
    assert out == "<s>[system]Be brief.[user]Hi[assistant]"


def test_template_helpers_real_templates_use():
    src = "{{ strftime_now('%Y') }}|{{ messages | tojson }}|{% if false %}{{ raise_exception('no') }}{% endif %}"
    out = ChatTemplate(src).render(MSGS)
    assert out.split("|")[0].isdigit()
    assert '"content": "Hi"' in out


def test_raise_exception_in_template_is_a_clear_error():
    with pytest.raises(ChatTemplateError, match="only user and assistant"):
        ChatTemplate("{{ raise_exception('only user and assistant') }}").render(MSGS)


@pytest.mark.parametrize(
    "evil",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{{ raise_exception.__globals__['__builtins__'] }}",
        "{% set x = messages.append(1) %}",
    ],
)
def test_sandbox_refuses_python_internals(evil):
    with pytest.raises(ChatTemplateError) as info:
        ChatTemplate(evil).render(MSGS)
    assert "template" in str(info.value)


def test_missing_template_falls_back_to_chatml():
    t = ChatTemplate(None)
    assert t.is_fallback
    assert t.render(MSGS).endswith("<|im_start|>assistant\n")
