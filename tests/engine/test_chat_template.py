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


def test_the_jinja_that_hugging_face_renders_templates_with():
    """{% break %}/{% continue %} (Cohere's, Kimi's), {% generation %} (LFM2.5's), dict(), tojson's separators, and
    tojson of a filter's lazy result (map): all of them refused before, a 400 for every chat with those models."""
    src = ("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{% generation %}[{{ m.content }}]"
           "{% endgeneration %}{% endfor %}{{ dict(a=1) | tojson(separators=(',', ':')) }}"
           "{{ messages | map(attribute='role') | tojson }}")  # fmt: skip
    assert ChatTemplate(src).render(MSGS) == '[Be brief.]{"a":1}["system", "user"]'


def test_messages_go_in_the_roles_the_template_writes():
    from engine.tools.render import render_request
    from engine.types import GenerationRequest

    def render(src: str, *messages: ChatMessage) -> str:
        return render_request(ChatTemplate(src), GenerationRequest(model="m", messages=messages)).prompt

    # Gemma 2's refuses a system message: its text opens the next message, as llama.cpp sends it
    gemma = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
             "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")  # fmt: skip
    assert render(gemma, *MSGS) == "<user>Be brief.\nHi"
    # Qwen's writes system, user, assistant and tool turns only: a developer message (OpenAI's newer name) was lost
    qwen = "{% for m in messages %}{% if m.role in ['system', 'user'] %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}"
    assert render(qwen, ChatMessage("developer", "Answer in French."), MSGS[1]) == "<system>Answer in French.<user>Hi"


def test_call_ids_are_nine_letters_and_digits_for_mistrals_templates():
    """Mistral's templates refuse any other id ("Tool call IDs should be alphanumeric strings with length 9!"), so a
    client sending back the ids Hearth gave (call_...) could not go on; a result with none (Ollama's) takes its call's."""
    from engine.tools.render import render_request
    from engine.tools.spec import ToolCall
    from engine.types import GenerationRequest

    src = ("{{ tools or '' }}{% for m in messages %}{% for c in m.tool_calls or [] %}{% if c.id | length != 9 %}"
           "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}"
           "[CALL {{ c.id }}]{% endfor %}{% if m.role == 'tool' %}{% if m.tool_call_id | length != 9 %}"
           "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}"
           "[RESULT {{ m.tool_call_id }}]{% endif %}{% endfor %}")  # fmt: skip
    calls = (ToolCall("a", "{}", id="call_0123456789abcdef"), ToolCall("b", "{}", id="x1y2z3w4v"))
    history = (ChatMessage("user", "Go"), ChatMessage("assistant", "", tool_calls=calls),
               ChatMessage("tool", "1", tool_call_id="call_0123456789abcdef"), ChatMessage("tool", "2"))  # fmt: skip
    prompt = render_request(ChatTemplate(src), GenerationRequest(model="m", messages=history)).prompt
    first, second = prompt.removeprefix("[CALL ").split("]")[0], "x1y2z3w4v"
    assert len(first) == 9 and first.isalnum()
    assert prompt == f"[CALL {first}][CALL {second}][RESULT {first}][RESULT {second}]"
