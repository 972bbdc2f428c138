"""Tool definitions, tool choices and tool calls: what a request offers and what a model answers.

These are plain frozen dataclasses so every layer (chat templates, parsers, constraints, the HTTP
dialects) shares them; nothing here knows about HTTP or a backend.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.errors import InvalidRequest
from engine.literal_text import MAX_TEMPLATE_DEPTH

ToolChoiceMode = Literal["auto", "none", "required", "function"]


def new_call_id() -> str:
    """A fresh tool-call id in OpenAI's style (``call_`` and 24 hex digits)."""
    return "call_" + uuid.uuid4().hex[:24]


#: The one argument a custom (freeform) tool is offered with: the model writes its text input as this string.
CUSTOM_INPUT = "input"
GRAMMAR_SYNTAXES = ("lark", "regex")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One function the model may call: its name, what it does, and a JSON schema of its arguments.

    ``custom``: for OpenAI's custom (freeform) tools, the tool as the request gave it, in the Responses shape
    (``{"type": "custom", "name", "description", "format"}``); the model is offered it as a function of one string,
    ``input``, whose description carries the format, and its calls go back as custom calls of that text."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False
    custom: Mapping[str, Any] | None = None

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
        (the open strings and objects closed); the raw text when neither parses. A lone surrogate a ``\\u`` escape
        wrote, which no UTF-8 can carry, is U+FFFD."""
        for text in (self.arguments, None):
            try:
                value = json.loads(self.arguments if text is not None else close_partial_json(self.arguments))
            except (TypeError, ValueError, RecursionError):  # nested past the interpreter's stack: the text as it is
                continue
            return without_surrogates(value) if "\\u" in self.arguments else value
        return self.arguments

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def without_surrogates(value: Any) -> Any:
    """Decoded JSON with each lone surrogate (``"\\ud83d"`` alone), which no UTF-8 can carry, as U+FFFD: a response
    holding one could not be sent."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    return value


def custom_input(call: ToolCall) -> str:
    """The text a call of a custom tool gives it: the ``input`` the model wrote (its only argument, when it named it
    otherwise; what it wrote of it, when the token limit or a malformed escape broke the JSON), else the arguments as
    they are. A lone surrogate, which no text can carry, is U+FFFD."""
    try:
        args = json.loads(call.arguments)
    except (ValueError, RecursionError):
        args = None
    text = call.arguments
    if isinstance(args, Mapping):
        value = args.get(CUSTOM_INPUT)
        if value is None and len(args) == 1:
            value = next(iter(args.values()))
        if isinstance(value, str):
            text = value
    elif isinstance(args, str):
        text = args
    elif args is None:  # read as the stream reads it, so that what was streamed and the whole agree
        stream = CustomInputStream()
        decoded = stream.feed(call.arguments)
        if stream.opened:
            text = decoded
    return _SURROGATE.sub("\ufffd", text)


def custom_call(name: str, text: Any, call_id: Any) -> ToolCall:
    """A custom tool's call sent back in a conversation, as the model made it (``text``: its input)."""
    return ToolCall(name=name, arguments=json.dumps({CUSTOM_INPUT: text if isinstance(text, str) else ""}, ensure_ascii=False),
                    id=str(call_id) if call_id else new_call_id())  # fmt: skip


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\", '"': '"'}
_INPUT_START = re.compile(r'\s*\{\s*"' + CUSTOM_INPUT + r'"\s*:\s*"')
_HEAD_LIMIT = 256  # arguments that have opened no input string by then are in another shape
_SPECIAL = re.compile(r'["\\]')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class CustomInputStream:
    """A custom tool call's input as its arguments stream in (``{"input": "...`` JSON text, piece by piece): each
    :meth:`feed` gives the text decoded since the last, in time linear in the whole (what is kept undecoded is at
    most an escape cut in two, or the arguments' opening)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.tail = ""  # not decoded yet: the arguments until the input string opens, then an escape cut in two
        self.opened = False
        self.closed = False
        self.sent: list[str] = []

    @property
    def raw(self) -> str:
        """The arguments so far, as the model wrote them."""
        return "".join(self.pieces)

    def feed(self, piece: str) -> str:
        self.pieces.append(piece)
        if self.closed or (not self.opened and len(self.tail) > _HEAD_LIMIT):
            return ""
        text = self.tail + piece
        if not self.opened:
            found = _INPUT_START.match(text)
            if found is None:
                self.tail = text
                return ""
            self.opened = True
            text = text[found.end() :]
        decoded, used, self.closed = _decode_string(text)
        self.tail = "" if self.closed else text[used:]
        self.sent.append(decoded)
        return decoded

    def rest(self, whole: str) -> str:
        """What of the call's whole input (:func:`custom_input`) is still to send, once its arguments are all in."""
        sent = "".join(self.sent)
        return whole[len(sent) :] if whole.startswith(sent) else ""


def _decode_string(text: str) -> tuple[str, int, bool]:
    """The JSON string's characters at the start of ``text`` (after its opening quote): what they decode to, how many
    were read (an escape cut off at the end waits for the rest) and whether the closing quote came."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        found = _SPECIAL.search(text, i)
        if found is None:
            out.append(text[i:])
            return "".join(out), n, False
        out.append(text[i : found.start()])
        i = found.start()
        if text[i] == '"':
            return "".join(out), i + 1, True
        if i + 1 >= n:
            break
        if text[i + 1] != "u":
            out.append(_ESCAPES.get(text[i + 1], text[i + 1]))  # an unknown escape: its character, as it stands
            i += 2
            continue
        decoded, used = _unicode_escape(text, i)
        if used == 0:
            break
        out.append(decoded)
        i += used
    return "".join(out), i, False


def _unicode_escape(text: str, i: int) -> tuple[str, int]:
    """The character of the ``\\uXXXX`` escape at ``text[i]`` (a surrogate pair's two) and how many characters it
    took; 0 while it is not all in. A lone surrogate is U+FFFD; an escape without four hex digits is its ``u``."""
    n = len(text)
    if i + 6 > n:
        return "", 0
    if not _HEX4.fullmatch(text, i + 2, i + 6):
        return "u", 2
    code = int(text[i + 2 : i + 6], 16)
    if 0xDC00 <= code < 0xE000:
        return "\ufffd", 6
    if code < 0xD800 or code >= 0xE000:
        return chr(code), 6
    for end, expected in ((i + 7, "\\"), (i + 8, "u")):  # a high surrogate: its low one must follow
        if end > n:
            return "", 0
        if text[end - 1] != expected:
            return "\ufffd", 6
    if i + 12 > n:
        return "", 0
    if _HEX4.fullmatch(text, i + 8, i + 12) and 0xDC00 <= (low := int(text[i + 8 : i + 12], 16)) < 0xE000:
        return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), 12
    return "\ufffd", 6


def close_partial_json(text: str) -> str:
    """JSON cut off mid-way, closed where it stopped: an open string ended, a dangling key (cut in its name, or
    written without its value) or comma dropped, the open arrays and objects closed (``{"city": "Par`` ->
    ``{"city": "Par"}``, ``{"city": "Paris", "un`` -> ``{"city": "Paris"}``)."""
    stack: list[str] = []
    in_string = escaped = False
    key_at = -1  # where the key an object is waiting a value for begins (its opening quote), or -1
    last = ""  # the last character outside strings, spaces aside
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch.isspace():
            continue
        if ch == '"':
            in_string = True
            if stack and stack[-1] == "}" and last in "{,":
                key_at = i
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
        if ch in ":}]":
            key_at = -1
        last = ch
    if key_at >= 0:  # a key and no value: dropped, with the comma before it
        out = text[:key_at].rstrip().rstrip(",")
    else:
        out = text + ('"' if in_string else "")
        if escaped:
            out = text[:-1] + '"'
        out = out.rstrip()
        out = out[:-1].rstrip() if out.endswith(",") else out
    if out.endswith(":"):  # a key with no value yet: dropped with the key
        out = out[: out.rfind('"', 0, out.rfind('"'))].rstrip().rstrip(",")
    return out + "".join(reversed(stack))


def _deeper_than(value: Any, most: int) -> bool:
    """Whether ``value`` (objects and arrays) nests more than ``most`` levels deep, found without recursion."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (Mapping, list, tuple)):
            if depth >= most:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, Mapping) else node))
    return False


def parse_tools(items: Sequence[Any] | None, *, custom: bool = False) -> tuple[ToolSpec, ...]:
    """Tool definitions from OpenAI's request shape (``{"type": "function", "function": {...}}``).

    A flat ``{"name", "parameters"}`` (the Responses API's shape) is accepted too; with ``custom``, OpenAI's custom
    (freeform) tools as well (APIs whose calls can come back as text).

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
        if kind not in ("function", "custom") or (kind == "custom" and not custom):
            kinds = "'function' and 'custom' tools are" if custom else "'function' tools are"
            raise InvalidRequest(f"{where} has type '{kind}'; only {kinds} supported.", param="tools")
        fn = item.get(kind, item)
        if not isinstance(fn, Mapping):
            raise InvalidRequest(f"{where}.function must be an object.", param="tools")
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InvalidRequest(f"{where} has no function name; give each tool a 'name'.", param="tools")
        where = f"tools[{i}] ('{name}')"
        if name in seen:
            raise InvalidRequest(f"{where} repeats a name; tool names must be unique.", param="tools")
        seen.add(name)
        if kind == "custom":
            out.append(_custom_tool(fn, name, where))
            continue
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, Mapping) or params.get("type", "object") != "object":
            raise InvalidRequest(
                f"{where} has parameters that are not a JSON schema of type 'object'.", param="tools"
            )
        if _deeper_than(params, MAX_TEMPLATE_DEPTH):  # as any value the chat template is given
            raise InvalidRequest(f"{where} has parameters nested more than {MAX_TEMPLATE_DEPTH} levels deep; send a "
                                 "flatter schema.", param="tools")  # fmt: skip
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise InvalidRequest(f"{where} has a description that is not text.", param="tools")
        out.append(ToolSpec(name=name, description=description, parameters=dict(params), strict=bool(fn.get("strict"))))
    return tuple(out)


def _custom_tool(spec: Mapping[str, Any], name: str, where: str) -> ToolSpec:
    """A custom tool (chat completions nest it under ``custom``, Responses give it flat): offered as a function of
    one string, whose description says what the text must be.

    Raises:
        InvalidRequest: its description is not text, or its format is neither text nor a Lark or regex grammar.
    """
    description = spec.get("description") or ""
    if not isinstance(description, str):
        raise InvalidRequest(f"{where} has a description that is not text.", param="tools")
    fmt = spec.get("format") or {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    said = "The tool's whole input, as plain text (not JSON)."
    if kind == "grammar":
        grammar = fmt.get("grammar", fmt)  # chat completions nest it, Responses give it flat
        syntax = grammar.get("syntax") if isinstance(grammar, Mapping) else None
        definition = grammar.get("definition") if isinstance(grammar, Mapping) else None
        if syntax not in GRAMMAR_SYNTAXES or not isinstance(definition, str) or not definition.strip():
            raise InvalidRequest(f"{where} has a grammar format without a 'definition' and a 'syntax' of lark or regex.",
                                 param="tools")  # fmt: skip
        fmt = {"type": "grammar", "syntax": syntax, "definition": definition}
        said += f" It must match this {'Lark grammar' if syntax == 'lark' else 'regular expression'}:\n{definition}"
    elif kind == "text":
        fmt = {"type": "text"}
    else:
        raise InvalidRequest(f"{where} has a format of type {kind!r}; give text or grammar.", param="tools")
    text: dict[str, Any] = {"type": "string", "description": said}
    if fmt.get("syntax") == "regex":
        from engine.schema_limits import pattern_syntax_error

        if (broken := pattern_syntax_error(fmt["definition"])) is not None:  # other syntax is left to the grammar compilers
            raise InvalidRequest(f"{where} has a regex grammar that is no regular expression ({broken}); fix it.", param="tools")  # its calls follow it, as a strict tool's arguments follow their schema
        text["pattern"] = f"^({fmt['definition']})$"
    parameters = {"type": "object", "properties": {CUSTOM_INPUT: text}, "required": [CUSTOM_INPUT], "additionalProperties": False}
    echo = {"type": "custom", "name": name, "description": description, "format": fmt}
    return ToolSpec(name=name, description=description, parameters=parameters, strict="pattern" in text, custom=echo)


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
        fn = value.get("function") or value.get("custom") or value  # chat completions nest the name, Responses not
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
        fn = (item.get("function") or item.get("custom") or item) if isinstance(item, Mapping) else None
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
        custom = item.get("custom") if isinstance(item, Mapping) and item.get("type") == "custom" else None
        if isinstance(custom, Mapping) and isinstance(custom.get("name"), str) and custom["name"]:
            out.append(custom_call(custom["name"], custom.get("input"), item.get("id")))
            continue
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
    "without_surrogates",
    "CUSTOM_INPUT",
    "CustomInputStream",
    "custom_call",
    "custom_input",
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
