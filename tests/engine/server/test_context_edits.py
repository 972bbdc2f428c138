"""Anthropic's context edits on a conversation (engine.server.context_edits), without a model: which tool uses a
clearing reaches, and what it reports."""

from __future__ import annotations

import asyncio

from engine.server.context_edits import CLEARED, ClearToolUses, apply, parse
from engine.tools import ToolCall
from engine.types import ChatMessage, GenerationRequest


def _loop(ids: list[str]) -> tuple[ChatMessage, ...]:
    out = [ChatMessage("user", "Read them all.")]
    for n, call_id in enumerate(ids):
        out.append(ChatMessage("assistant", "", tool_calls=(ToolCall(name="read", arguments=f'{{"n": {n}}}', id=call_id),)))
        out.append(ChatMessage("tool", f"result {n} " * 20, tool_call_id=call_id, name="read"))
    return tuple(out)


def _count(req: GenerationRequest) -> int:
    return sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in req.messages or ())


def _applied(messages, edit: dict) -> tuple[tuple[ChatMessage, ...], list[dict]]:
    async def count(req):
        return _count(req)

    req, applied = asyncio.run(apply(GenerationRequest(model="m", messages=messages), parse({"edits": [edit]}), count))
    return req.messages or (), applied


def test_uses_are_told_apart_by_place_so_ids_a_client_numbers_per_answer_still_clear():
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1}, "keep": {"type": "tool_uses", "value": 1},
            "clear_tool_inputs": True}  # fmt: skip
    messages, applied = _applied(_loop(["toolu_0", "toolu_0", "toolu_0"]), edit)  # the same id in every answer
    assert [m.content for m in messages if m.role == "tool"] == [CLEARED, CLEARED, "result 2 " * 20]
    assert [c.arguments for m in messages for c in m.tool_calls] == ["{}", "{}", '{"n": 2}']
    freed = _count(GenerationRequest(model="m", messages=_loop(["toolu_0"] * 3))) - _count(GenerationRequest(model="m", messages=messages))
    assert freed > 0 and applied == [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": freed}]
    # cleared already: nothing is changed, and nothing is reported
    again, applied = _applied(messages, edit)
    assert again == messages and applied == []


def test_excluded_tools_keep_their_results_and_a_use_without_a_result_is_not_counted():
    messages = (*_loop(["a", "b"]), ChatMessage("assistant", "", tool_calls=(ToolCall(name="write", arguments="{}", id="c"),)),
                ChatMessage("tool", "written", tool_call_id="c", name="write"),
                ChatMessage("assistant", "", tool_calls=(ToolCall(name="read", arguments="{}", id="d"),)))  # fmt: skip
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 0}, "keep": {"type": "tool_uses", "value": 0},
            "exclude_tools": ["write"]}  # fmt: skip
    out, applied = _applied(messages, edit)
    assert [m.content for m in out if m.role == "tool"] == [CLEARED, CLEARED, "written"]
    assert applied[0]["cleared_tool_uses"] == 2  # "d" has no result to clear, and its input was not asked for
    assert isinstance(parse({"edits": [edit]})[0], ClearToolUses)
