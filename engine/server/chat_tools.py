"""Tool calls and thinking in OpenAI's chat-completion shapes: request fields in, message and deltas out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.chat_template import TEMPLATE_GLOBALS
from engine.errors import InvalidRequest
from engine.tools import CustomInputStream, ToolCall, ToolSpec, custom_input, parse_tool_choice, parse_tools
from engine.types import GenerationChunk

# The names a chat template is rendered with from the request and the model (engine.chat_template,
# engine.tools.render) and the functions its sandbox gives it: chat_template_kwargs may not replace them.
RESERVED_TEMPLATE_NAMES = frozenset(
    {"messages", "add_generation_prompt", "bos_token", "eos_token", "tools", *TEMPLATE_GLOBALS}
)
# reasoning_effort values that turn a model's thinking off; the others turn it on.
_THINKING_OFF = ("none", "minimal")
_EFFORTS = ("none", "minimal", "low", "medium", "high")


def request_fields(body: Any) -> dict[str, Any]:
    """GenerationRequest fields from a chat body's ``tools``, ``tool_choice``, ``parallel_tool_calls``,
    ``reasoning_effort`` and ``chat_template_kwargs``.

    Raises:
        InvalidRequest: a tool definition or the tool choice is malformed (the message names the tool).
    """
    tools_in, choice_in, parallel = body.tools, body.tool_choice, body.parallel_tool_calls
    if getattr(body, "legacy_functions", False):  # OpenAI's deprecated functions: one call at most
        tools_in = [{"type": "function", "function": f} for f in body.functions]
        choice_in, parallel = _legacy_choice(body.function_call), False
    tools = parse_tools(tools_in, custom=True)
    choice = parse_tool_choice(choice_in, tools)
    kwargs: dict[str, Any] = dict(body.chat_template_kwargs or {})
    taken = sorted(RESERVED_TEMPLATE_NAMES.intersection(kwargs))
    if taken:
        raise InvalidRequest(
            f"'chat_template_kwargs.{taken[0]}' is Hearth's to give the chat template (from the request, the "
            "model or its sandbox), so it cannot be set there; leave it out (messages and tools have fields of their own).",
            param="chat_template_kwargs",
        )
    thinking = kwargs.pop("enable_thinking", None)
    if thinking is not None and not isinstance(thinking, bool):
        raise InvalidRequest("'chat_template_kwargs.enable_thinking' must be true or false.", param="chat_template_kwargs")
    effort = body.reasoning_effort
    if effort is not None:
        if effort not in _EFFORTS:
            raise InvalidRequest(
                f"'reasoning_effort' must be one of {', '.join(_EFFORTS)}, got '{effort}'.", param="reasoning_effort"
            )
        if thinking is None:
            thinking = effort not in _THINKING_OFF
        kwargs.setdefault("reasoning_effort", effort)
    return {
        "tools": tools,
        "tool_choice": choice,
        # several forced calls only when asked for explicitly (docs/tools.md)
        "parallel_tool_calls": parallel,
        "thinking": thinking,
        "template_kwargs": tuple(kwargs.items()),
        "continue_final": body.continue_final_message,
    }


def _legacy_choice(function_call: Any) -> Any:
    """The ``tool_choice`` a deprecated ``function_call`` (``none``, ``auto`` or ``{"name": ...}``) stands for."""
    if function_call is None or function_call in ("none", "auto"):
        return function_call
    if isinstance(function_call, dict) and isinstance(function_call.get("name"), str):
        return {"type": "function", "function": {"name": function_call["name"]}}
    raise InvalidRequest("'function_call' must be \"none\", \"auto\" or {\"name\": \"FUNCTION\"}.", param="function_call")


def legacy_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat ``message`` in the deprecated functions' shape: its (first) call as ``function_call``."""
    calls = message.pop("tool_calls", None)
    if calls:
        message["function_call"] = dict(calls[0]["function"])
    return message


def legacy_delta(delta: dict[str, Any]) -> dict[str, Any] | None:
    """A streamed tool-call ``delta`` in the deprecated functions' shape (None: a later call's, left out)."""
    (item,) = delta["tool_calls"]
    if item["index"] != 0 or "function" not in item:
        return None
    return {"function_call": dict(item["function"])}


def _call(call: ToolCall, custom: frozenset[str]) -> dict[str, Any]:
    if call.name in custom:
        return {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": custom_input(call)}}
    return call.as_openai()


def message(text: str, reasoning: str, final: GenerationChunk | None, tools: Sequence[ToolSpec] = ()) -> dict[str, Any]:
    """The assistant ``message`` of a non-streamed choice (content null when it only called tools); a call of one of
    the custom ``tools`` is a ``custom`` call of its text."""
    calls = final.tool_calls if final is not None else ()
    out: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None, "refusal": None}
    if calls:
        custom = frozenset(t.name for t in tools if t.custom is not None)
        out["tool_calls"] = [_call(c, custom) for c in calls]
    if reasoning:
        out["reasoning_content"] = reasoning
        out["reasoning"] = reasoning
    return out


def reasoning_delta(chunk: GenerationChunk) -> dict[str, Any] | None:
    """The ``delta`` for a chunk's thinking (sent before its content), or None."""
    if not chunk.reasoning:
        return None
    return {"reasoning_content": chunk.reasoning, "reasoning": chunk.reasoning}


class CallDeltas:
    """One choice's tool-call pieces as OpenAI streams them (sent after its content): a function's arguments as the
    model writes them, a custom tool's input as text, decoded from them as they come."""

    def __init__(self, tools: Sequence[ToolSpec] = ()) -> None:
        self.custom = frozenset(t.name for t in tools if t.custom is not None)
        self.inputs: dict[int, CustomInputStream] = {}  # call index -> its custom input so far

    def deltas(self, chunk: GenerationChunk) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for d in chunk.tool_call_deltas:
            item: dict[str, Any] = {"index": d.index}
            if d.id is not None and d.name in self.custom:
                stream = self.inputs[d.index] = CustomInputStream()
                item.update(id=d.id, type="custom", custom={"name": d.name, "input": stream.feed(d.arguments or "")})
            elif d.id is not None:
                item.update(id=d.id, type="function", function={"name": d.name, "arguments": d.arguments})
            elif d.index in self.inputs:
                text = self.inputs[d.index].feed(d.arguments or "")
                if not text:
                    continue
                item["custom"] = {"input": text}
            else:
                item["function"] = {"arguments": d.arguments}
            out.append({"tool_calls": [item]})
        if chunk.finish_reason is not None:  # what the pieces held back (an input the model wrote in another shape)
            for index, stream in self.inputs.items():
                if index < len(chunk.tool_calls) and (rest := stream.rest(custom_input(chunk.tool_calls[index]))):
                    out.append({"tool_calls": [{"index": index, "custom": {"input": rest}}]})
            self.inputs = {}
        return out


def reasoning_tokens(finals: list[GenerationChunk | None]) -> int:
    return sum(f.reasoning_tokens for f in finals if f is not None)


__all__ = ["request_fields", "message", "legacy_message", "legacy_delta", "reasoning_delta", "CallDeltas", "reasoning_tokens"]
