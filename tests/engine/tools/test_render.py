"""Rendering tools and tool results through templates with tool sections, and the generic format."""

from __future__ import annotations

import json

import pytest

from engine.chat_template import ChatTemplate, ChatTemplateError
from engine.errors import InvalidRequest
from engine.tools import ToolChoice, parse_tool_choice, parse_tools, render_request
from engine.types import GenerationRequest, as_messages
from tests.engine.tools.templates import HERMES, LLAMA31, MISTRAL, PLAIN, THINKING

TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
)
CONVERSATION = as_messages(
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
    ]
)


def request(**kw) -> GenerationRequest:
    return GenerationRequest(model="m", messages=kw.pop("messages", CONVERSATION), tools=TOOLS, **kw)


def test_hermes_template_renders_tools_calls_and_results():
    r = render_request(ChatTemplate(HERMES), request())
    assert r.tool_format == "hermes"
    assert '"name": "get_weather"' in r.prompt and "# Tools" in r.prompt
    # the earlier call with its arguments as an object, and the tool's result
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in r.prompt
    assert "<tool_response>\nSunny, 21 C\n</tool_response>" in r.prompt
    assert r.prompt.endswith("<|im_start|>assistant\n")


def test_llama31_template_renders_tools_calls_and_results():
    r = render_request(ChatTemplate(LLAMA31, bos_token="<|begin_of_text|>"), request())
    assert r.tool_format == "llama3"
    assert '"parameters": dictionary' in r.prompt and '"name": "get_weather"' in r.prompt
    assert '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}' in r.prompt
    assert "<|start_header_id|>ipython<|end_header_id|>\n\nSunny, 21 C" in r.prompt


def test_template_without_tools_gets_the_generic_format():
    r = render_request(ChatTemplate(PLAIN), request())
    assert r.tool_format == "generic"
    system = r.prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\nYou can call these tools")
    assert json.dumps(TOOLS[0].as_openai()["function"]) in system
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in r.prompt
    # the result names the function of the call it answers (found by tool_call_id), as every dialect renders it
    assert '<|im_start|>user\n<tool_response>\n{"name": "get_weather", "content": "Sunny, 21 C"}\n</tool_response>' in r.prompt
    assert "<|im_start|>tool" not in r.prompt


def test_tool_choice_none_offers_no_tools_and_looks_for_no_calls():
    r = render_request(ChatTemplate(PLAIN), request(tool_choice=ToolChoice("none")))
    assert "You can call these tools" not in r.prompt and r.tools == () and r.constraint is None


def test_forced_choice_gives_a_constraint_of_the_named_tool():
    tools = parse_tools([TOOLS[0].as_openai(), {"type": "function", "function": {"name": "add"}}])
    choice = parse_tool_choice({"type": "function", "function": {"name": "add"}}, tools)
    r = render_request(ChatTemplate(HERMES), GenerationRequest(model="m", messages=CONVERSATION, tools=tools,
                                                               tool_choice=choice))  # fmt: skip
    assert r.constraint is not None and [t.name for t in r.constraint.tools] == ["add"]
    assert r.constraint.prefix == "<tool_call>\n" and not r.constraint.parallel
    assert render_request(ChatTemplate(HERMES), request(tool_choice=ToolChoice("auto"))).constraint is None


def test_thinking_switch_and_an_opened_thinking_section():
    off = render_request(ChatTemplate(HERMES), request(thinking=False))
    assert off.prompt.endswith("<think>\n\n</think>\n\n") and not off.thinking_started
    r = render_request(ChatTemplate(THINKING), GenerationRequest(model="m", messages=as_messages(
        [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>add</think>4"},
         {"role": "user", "content": "3+3?"}])))  # fmt: skip
    assert r.thinking_started
    assert "<|assistant|>4<|end|>" in r.prompt  # earlier thinking is not sent back


@pytest.mark.parametrize(
    "tools,needle",
    [
        ([{"type": "function", "function": {"description": "x"}}], "tools[0] has no function name"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}], "tools[0] ('f')"),
        ([{"type": "function", "function": {"name": "f", "parameters": []}}], "not a JSON schema"),
        ([{"type": "code_interpreter"}], "only 'function' tools"),
        ([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}], "unique"),
    ],
)
def test_bad_tool_definitions_say_which_tool(tools, needle):
    with pytest.raises(InvalidRequest, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_tools(tools)


def test_tool_choice_naming_an_unknown_tool_is_refused():
    with pytest.raises(InvalidRequest, match="'nope'"):
        parse_tool_choice({"type": "function", "function": {"name": "nope"}}, TOOLS)
    with pytest.raises(InvalidRequest, match="no tools"):
        parse_tool_choice("required", ())


def test_thinking_required_of_a_template_that_cannot_think_is_refused():
    assert render_request(ChatTemplate(THINKING), request(require_thinking=True)).prompt
    with pytest.raises(InvalidRequest, match="does not support thinking"):
        render_request(ChatTemplate(PLAIN), request(require_thinking=True))
    assert render_request(ChatTemplate(PLAIN), request(thinking=True)).prompt  # only Ollama's `think` requires it


def test_continuing_the_final_answer_ends_the_prompt_inside_it():
    """vLLM's ``continue_final_message``: the prompt stops where the answer's text stops, with no end of turn and no
    new assistant turn, so the model goes on with the same answer."""
    partial = as_messages([{"role": "user", "content": "Count to ten."}, {"role": "assistant", "content": "One, two, three,"}])
    going_on = render_request(ChatTemplate(PLAIN), GenerationRequest(model="m", messages=partial, continue_final=True))
    assert going_on.prompt == "<|im_start|>user\nCount to ten.<|im_end|>\n<|im_start|>assistant\nOne, two, three,"
    # a template that trims the answer still ends where the answer's words end
    trimming = PLAIN.replace("{{ m.content }}", "{{ m.content | trim }}")
    spaced = as_messages([*partial[:1], {"role": "assistant", "content": "One, two, three, "}])
    rendered = render_request(ChatTemplate(trimming), GenerationRequest(model="m", messages=spaced, continue_final=True))
    assert rendered.prompt.endswith("assistant\nOne, two, three,")
    # an empty answer is one not begun: the assistant's turn opens
    empty = as_messages([*partial[:1], {"role": "assistant", "content": ""}])
    opened = render_request(ChatTemplate(PLAIN), GenerationRequest(model="m", messages=empty, continue_final=True))
    assert opened.prompt == "<|im_start|>user\nCount to ten.<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(InvalidRequest, match="the last message must be the assistant's"):
        GenerationRequest(model="m", messages=partial[:1], continue_final=True)
    rewriting = PLAIN.replace("{{ m.content }}", "{{ m.content | upper }}")
    with pytest.raises(InvalidRequest, match="cannot be continued"):
        render_request(ChatTemplate(rewriting), GenerationRequest(model="m", messages=partial, continue_final=True))


# Gemma 2's template: no system role, and roles that must alternate
GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


def test_a_template_that_wants_alternating_roles_gets_runs_of_one_role_joined():
    gemma, chatml = ChatTemplate(GEMMA2, bos_token="<bos>"), ChatTemplate(PLAIN)
    assert gemma.alternates and not gemma.takes_system and not chatml.alternates
    messages = as_messages([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "A summary of what came before."},
        {"role": "user", "content": "What next?"},
        {"role": "assistant", "content": "First part."},
        {"role": "assistant", "content": "Second part."},
        {"role": "user", "content": "Thanks."},
    ])  # fmt: skip
    r = render_request(gemma, GenerationRequest(model="m", messages=messages))
    assert r.prompt == (
        "<bos><start_of_turn>user\nBe brief.\nA summary of what came before.\n\nWhat next?<end_of_turn>\n"
        "<start_of_turn>model\nFirst part.\n\nSecond part.<end_of_turn>\n"
        "<start_of_turn>user\nThanks.<end_of_turn>\n<start_of_turn>model\n"
    )
    # a template that takes them as they are gets each message as it was sent
    r = render_request(chatml, GenerationRequest(model="m", messages=messages[1:3]))
    assert r.prompt.count("<|im_start|>user\n") == 2


def test_a_user_message_right_after_tool_results_gets_an_empty_answer_before_it_where_the_template_wants_one():
    """Mistral's template checks that roles alternate with the tool turns left out, so a call, its result and the
    user's next words (an Anthropic client's result and text in one turn) read as two user turns and it refuses
    them; the turn is rendered with the model's turn closed empty between them instead."""
    mistral = ChatTemplate(MISTRAL, bos_token="<s>", eos_token="</s>")
    going_on = [*CONVERSATION, *as_messages([{"role": "user", "content": "And in Rome?"}])]
    with pytest.raises(ChatTemplateError, match="must alternate"):
        mistral.render(going_on)  # the template alone
    prompt = render_request(mistral, request(messages=going_on)).prompt
    assert prompt.startswith("<s>[INST] Weather in Paris?[/INST][TOOL_CALLS] [")
    assert '"call_id": "' in prompt and prompt.count("[TOOL_RESULTS]") == 1
    assert "[/TOOL_RESULTS] </s>[AVAILABLE_TOOLS]" in prompt and prompt.endswith("[INST] Be brief.\n\nAnd in Rome?[/INST]")
    # where the answer is there, or the turn ends on the result, the conversation is rendered as it was sent
    answered = [*CONVERSATION, *as_messages([{"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Rome?"}])]
    assert "[/TOOL_RESULTS] Sunny.</s>" in render_request(mistral, request(messages=answered)).prompt
    assert render_request(mistral, request()).prompt.endswith("[/TOOL_RESULTS]")
    # a template that takes a user message after a result gets no empty answer
    hermes = render_request(ChatTemplate(HERMES), request(messages=going_on)).prompt
    assert "<|im_start|>assistant\n<|im_end|>" not in hermes and hermes.count("<|im_start|>assistant") == 2
    # a conversation the template refuses either way is still refused in its own words
    opening_answer = as_messages([{"role": "assistant", "content": "Hello."}])
    with pytest.raises(ChatTemplateError, match="must alternate"):
        render_request(mistral, request(messages=[CONVERSATION[0], *opening_answer, *going_on[1:]]))
