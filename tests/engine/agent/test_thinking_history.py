"""Thinking in later turns: the loop sends each round's thinking back as ``reasoning_content``, and the
engine's renderer passes it to a chat template that asks for it and drops it for the others.

The thinking model is the one part this machine cannot run: its stream is scripted at the HTTP edge
(an httpx transport passed to the real ChatClient); the tool runs on the real recorder server.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from engine.agent import AgentLoop, ApprovalPolicy, ChatClient, McpHub
from engine.chat_template import ChatTemplate
from engine.server.schemas import ChatCompletionBody
from engine.tools import parse_tools, render_request
from engine.types import GenerationRequest, as_messages
from tests.engine.agent.conftest import stdio_config

FIRST_THOUGHT = "The user wants a word looked up; the lookup tool does that."
SECOND_THOUGHT = "The tool says it is an animal."

# Qwen3 style: the thinking of the assistant turns after the last question, from reasoning_content.
QWEN3_STYLE = """
{%- if tools %}<|im_start|>system
# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools><|im_end|>
{% endif %}
{%- set ns = namespace(last_query=-1) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_query = loop.index0 %}{% endif %}{% endfor %}
{%- for m in messages %}
{%- if m.role == 'assistant' %}<|im_start|>assistant
{% if loop.index0 > ns.last_query and m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>

{% endif %}{{ m.content or '' }}{% for c in m.tool_calls or [] %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# A template without tools of its own that shows every answer's thinking (message.reasoning_content).
EVERY_THOUGHT = """
{%- for m in messages %}<|{{ m.role }}|>
{% if m.reasoning_content %}[thought: {{ m.reasoning_content }}]
{% endif %}{{ m.content }}<|end|>
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

# ChatML as the starter model's: it never asks for thinking.
PLAIN = """
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def _sse(*deltas: dict, finish: str) -> bytes:
    events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


ROUNDS = [
    _sse(
        {"reasoning_content": FIRST_THOUGHT},
        {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                         "function": {"name": "lookup", "arguments": '{"word": "cat"}'}}]},
        finish="tool_calls",
    ),  # fmt: skip
    _sse({"reasoning_content": SECOND_THOUGHT}, {"content": "A cat is a small domestic animal."}, finish="stop"),
]


@pytest.fixture(scope="module")
def second_request(tmp_path_factory) -> dict:
    """The body of the loop's second model turn (after one real tool call), and the result."""
    log = tmp_path_factory.mktemp("thinking") / "calls.jsonl"
    bodies: list[dict] = []

    async def model(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=ROUNDS[len(bodies) - 1], headers={"content-type": "text/event-stream"})

    async def main():
        hub = McpHub([stdio_config("rec", log).with_tool("crash", False)])
        await hub.start()
        http = httpx.AsyncClient(transport=httpx.MockTransport(model))
        try:
            loop = AgentLoop(ChatClient("http://hearth.test/v1", http=http), hub, ApprovalPolicy(allow_all=True), model="m")
            return await loop.run([{"role": "user", "content": "What does cat mean?"}])
        finally:
            await http.aclose()
            await hub.close()

    result = asyncio.run(main())
    assert result.calls[0].status == "done" and len(bodies) == 2
    return {"body": bodies[1], "result": result}


def test_each_rounds_thinking_goes_back_with_its_turn(second_request):
    sent = second_request["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["reasoning_content"] == FIRST_THOUGHT and sent[1]["tool_calls"][0]["id"] == "call_1"
    final = second_request["result"].messages[-1]  # the history for the next question
    assert final["content"] == "A cat is a small domestic animal." and final["reasoning_content"] == SECOND_THOUGHT


@pytest.mark.parametrize(
    ("template", "shown"),
    [(QWEN3_STYLE, f"<think>\n{FIRST_THOUGHT}\n</think>"), (EVERY_THOUGHT, f"[thought: {FIRST_THOUGHT}]"), (PLAIN, None)],
    ids=["qwen3-style", "without-tools", "plain"],
)
def test_the_template_decides_whether_the_model_sees_it(second_request, template, shown):
    body = ChatCompletionBody.model_validate(second_request["body"])  # as the server reads it
    messages = as_messages([m.model_dump() for m in body.messages])
    tools = parse_tools(second_request["body"]["tools"])
    prompt = render_request(ChatTemplate(template), GenerationRequest(model="m", messages=messages, tools=tools)).prompt
    if shown is None:
        assert FIRST_THOUGHT not in prompt  # a template that does not ask never sees it
    else:
        assert shown in prompt
    assert "small domestic animal" in prompt  # the tool's result is there either way
