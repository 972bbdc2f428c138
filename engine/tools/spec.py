"""Tool definitions, tool choices and tool calls: what a request offers and what a model answers.

These are plain frozen dataclasses so every layer (chat templates, parsers, constraints, the HTTP
dialects) shares them; nothing here knows about HTTP or a backend.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.errors import InvalidRequest

ToolChoiceMode = Literal["auto", "none", "required", "function"]


def new_call_id() -> str:
    """A fresh tool-call id in OpenAI's style (``call_`` and 24 hex digits)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One function the model may call: its name, what it does, and a JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False

    def as_openai(self) -> dict[str, Any]:
        """The tool as OpenAI and Hugging Face chat templates take it (``{"type": "function", ...}``)."""
        fn: dict[str, Any] = {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}
        if self.strict:
            fn["strict"] = True
        return {"type": "function", "function": fn}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """Whether the model may, must or must not call a tool (``function``: this one, by ``name``); ``allowed``: the
    tools it may call, of those offered (OpenAI's ``allowed_tools``; None: any)."""

    mode: ToolChoiceMode = "auto"
    name: str | None = None
    allowed: tuple[str, ...] | None = None

    def callable(self, tools: Sequence[ToolSpec]) -> tuple[ToolSpec, ...]:
        """The offered ``tools`` this choice lets the model call."""
        if self.mode == "none":
            return ()
        if self.mode == "function":
            return tuple(t for t in tools if t.name == self.name)
        return tuple(tools) if self.allowed is None else tuple(t for t in tools if t.name in self.allowed)

    @property
    def forced(self) -> bool:
        """True when the output must be a tool call (``required`` or a named function)."""
        return self.mode in ("required", "function")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model made: ``arguments`` is the JSON text of the arguments object."""

    name: str
    arguments: str = "{}"
    id: str = field(default_factory=new_call_id)

    @property
    def arguments_object(self) -> Any:
        """The arguments parsed from JSON; of a call cut short at the token limit, what of them was written
        (the open strings and objects closed); the raw text when neither parses."""
        try:
            return json.loads(self.arguments)
        except (TypeError, ValueError, RecursionError):  # nested past the interpreter's stack: the text as it is
            pass
        try:
            return json.loads(close_partial_json(self.arguments))
        except (TypeError, ValueError, RecursionError):
            return self.arguments

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def close_partial_json(text: str) -> str:
    """JSON cut off mid-way, closed where it stopped: an open string ended, a dangling key or comma dropped,
    the open arrays and objects closed (``{"city": "Par`` -> ``{"city": "Par"}``)."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    out = text + ('"' if in_string else "")
    if escaped:
        out = text[:-1] + '"'
    out = out.rstrip()
    out = out[:-1].rstrip() if out.endswith(",") else out
    if out.endswith(":"):  # a key with no value yet: dropped with the key
        out = out[: out.rfind('"', 0, out.rfind('"'))].rstrip().rstrip(",")
    return out + "".join(reversed(stack))


def parse_tools(items: Sequence[Any] | None) -> tuple[ToolSpec, ...]:
    """Tool definitions from OpenAI's request shape (``{"type": "function", "function": {...}}``).

    A flat ``{"name", "parameters"}`` (the Responses API's shape) is accepted too.

    Raises:
        InvalidRequest: a tool has no name, is not a function, or its parameters are not an object schema;
            the message names the tool.
    """
    out: list[ToolSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(items or ()):
        where = f"tools[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidRequest(f"{where} must be an object with 'type' and 'function'.", param="tools")
        kind = item.get("type", "function")
        if kind != "function":
            raise InvalidRequest(f"{where} has type '{kind}'; only 'function' tools are supported.", param="tools")
        fn = item.get("function", item)
        if not isinstance(fn, Mapping):
            raise InvalidRequest(f"{where}.function must be an object.", param="tools")
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InvalidRequest(f"{where} has no function name; give each tool a 'name'.", param="tools")
        where = f"tools[{i}] ('{name}')"
        if name in seen:
            raise InvalidRequest(f"{where} repeats a name; tool names must be unique.", param="tools")
        seen.add(name)
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, Mapping) or params.get("type", "object") != "object":
            raise InvalidRequest(
                f"{where} has parameters that are not a JSON schema of type 'object'.", param="tools"
            )
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise InvalidRequest(f"{where} has a description that is not text.", param="tools")
        out.append(ToolSpec(name=name, description=description, parameters=dict(params), strict=bool(fn.get("strict"))))
    return tuple(out)


def parse_tool_choice(value: Any, tools: Sequence[ToolSpec]) -> ToolChoice:
    """``auto`` / ``none`` / ``required``, ``{"type": "function", "function": {"name": ...}}``, or
    ``{"type": "allowed_tools", ...}``.

    Raises:
        InvalidRequest: the value is not one of those, names an unknown tool, or forces a call with no tools.
    """
    if value is None:
        return ToolChoice("auto")
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise InvalidRequest(
                f"'tool_choice' must be auto, none, required or a function, got '{value}'.", param="tool_choice"
            )
        choice = ToolChoice(value)  # type: ignore[arg-type]
    elif isinstance(value, Mapping) and value.get("type") == "allowed_tools":
        choice = _allowed_tools(value, tools)
    elif isinstance(value, Mapping):
        fn = value.get("function", value)
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or not name:
            raise InvalidRequest("'tool_choice' names no function; give function.name.", param="tool_choice")
        if name not in {t.name for t in tools}:
            raise InvalidRequest(f"'tool_choice' names '{name}', which is not among the tools.", param="tool_choice")
        choice = ToolChoice("function", name)
    else:
        raise InvalidRequest("'tool_choice' must be a string or an object naming a function.", param="tool_choice")
    if choice.forced and not tools:
        raise InvalidRequest("'tool_choice' asks for a tool call but the request has no tools.", param="tool_choice")
    return choice


def _allowed_tools(value: Mapping[str, Any], tools: Sequence[ToolSpec]) -> ToolChoice:
    """OpenAI's ``{"type": "allowed_tools", ...}``: chat completions nest ``mode`` and ``tools`` under
    ``allowed_tools``, Responses gives them beside ``type``.

    Raises:
        InvalidRequest: the mode is not auto or required, or a tool is missing or not among the tools.
    """
    spec = value.get("allowed_tools", value)
    spec = spec if isinstance(spec, Mapping) else {}
    mode = spec.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise InvalidRequest("'tool_choice.allowed_tools.mode' must be auto or required.", param="tool_choice")
    items = spec.get("tools")
    if not isinstance(items, list) or not items:
        raise InvalidRequest("'tool_choice.allowed_tools.tools' must list the tools the model may call.", param="tool_choice")
    known = {t.name for t in tools}
    names = []
    for item in items:
        fn = item.get("function", item) if isinstance(item, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or name not in known:
            raise InvalidRequest(f"'tool_choice.allowed_tools' names {name!r}, which is not among the tools.", param="tool_choice")
        names.append(name)
    return ToolChoice(mode, allowed=tuple(dict.fromkeys(names)))  # type: ignore[arg-type]


def parse_tool_calls(items: Sequence[Any] | None) -> tuple[ToolCall, ...]:
    """An assistant message's ``tool_calls`` in OpenAI's shape (arguments as JSON text or an object).

    Raises:
        InvalidRequest: a call has no function name.
    """
    out = []
    for i, item in enumerate(items or ()):
        fn = item.get("function") if isinstance(item, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(name, str) or not name:
            raise InvalidRequest(f"tool_calls[{i}] of an assistant message has no function name.", param="messages")
        args = fn.get("arguments")
        if args is None:
            args = "{}"
        elif not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        call_id = item.get("id") or new_call_id()
        out.append(ToolCall(name=name, arguments=args, id=str(call_id)))
    return tuple(out)


__all__ = [
    "close_partial_json",
    "ToolSpec",
    "ToolChoice",
    "ToolChoiceMode",
    "ToolCall",
    "new_call_id",
    "parse_tools",
    "parse_tool_choice",
    "parse_tool_calls",
]
