"""Reading tool calls out of a model's output, per model family, as the text streams in.

A parser is fed the answer text piece by piece and returns what is safe to show: plain content,
and tool calls once they are complete and parse. Text that could be the start of a call's markup
(``<tool_c`` at the end of a piece) is held back until the next piece decides it, so markup never
reaches the content. A call is only reported when its JSON parses and names an offered tool;
anything else that looked like a call is given back as plain text, never an error.

Families (see docs/tools.md): ``hermes`` (``<tool_call>{...}</tool_call>``: Hermes, Qwen 2.5/3),
``llama3`` (``<|python_tag|>`` or a bare ``{"name", "parameters"}`` object: Llama 3.1-3.3),
``mistral`` (``[TOOL_CALLS]`` then a JSON list, or ``name[ARGS]{...}``), and ``generic`` (Hearth's
own format for templates that know no tools: the hermes tags, or a bare JSON call as the whole answer).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engine.tools.spec import ToolCall, new_call_id, without_surrogates

ToolFormat = Literal[
    "hermes", "llama3", "mistral", "deepseek", "gemma4", "granite", "pythonic", "seed", "apertus", "cohere", "minimax",
    "minicpm", "kimi", "generic",
]
TOOL_FORMATS: tuple[str, ...] = (
    "hermes", "llama3", "mistral", "deepseek", "gemma4", "granite", "pythonic", "seed", "apertus", "cohere", "minimax",
    "minicpm", "kimi", "generic",
)

# DeepSeek's markers (R1 and its distills, V3): <｜tool▁calls▁begin｜>, then for each call <｜tool▁call▁begin｜>
# function<｜tool▁sep｜>NAME and its arguments in a ```json block (R1), or NAME<｜tool▁sep｜>ARGUMENTS (V3.1), then
# <｜tool▁call▁end｜>; <｜tool▁calls▁end｜> closes them all.
DEEPSEEK_CALLS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
_DEEPSEEK_CALL, _DEEPSEEK_SEP, _DEEPSEEK_CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call, as OpenAI streams them.

    The first delta of a call carries ``id`` and ``name`` (and empty ``arguments``); later deltas
    carry pieces of ``arguments`` only.
    """

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """What one piece of output turned into: content text and tool-call deltas."""

    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()


@dataclass(frozen=True, slots=True)
class _Family:
    start: tuple[str, ...]  # markers that open a call
    end: str | None  # marker that closes one (None: the call runs to the end of the answer)
    bare_json: bool  # a JSON call may stand alone as the whole answer


FAMILIES: dict[str, _Family] = {
    "hermes": _Family(start=("<tool_call>",), end="</tool_call>", bare_json=False),
    "llama3": _Family(start=("<|python_tag|>",), end=None, bare_json=True),
    "mistral": _Family(start=("[TOOL_CALLS]",), end=None, bare_json=True),
    "deepseek": _Family(start=(DEEPSEEK_CALLS[0],), end=DEEPSEEK_CALLS[1], bare_json=False),
    "gemma4": _Family(start=("<|tool_call>",), end="<tool_call|>", bare_json=False),
    "granite": _Family(start=("<|tool_call|>",), end=None, bare_json=False),  # then a JSON list of calls
    # LFM2's: a Python list of calls with keyword arguments, [get_weather(city="Paris")]
    "pythonic": _Family(start=("<|tool_call_start|>",), end="<|tool_call_end|>", bare_json=False),
    # Seed-OSS's: Qwen3-Coder's <function=NAME> body in tags of its own
    "seed": _Family(start=("<seed:tool_call>",), end="</seed:tool_call>", bare_json=False),
    # Apertus's: a JSON list of {NAME: ARGUMENTS}
    "apertus": _Family(start=("<|tools_prefix|>",), end="<|tools_suffix|>", bare_json=False),
    # Command R7B's and Command A's: a JSON list of {"tool_call_id", "tool_name", "parameters"}
    "cohere": _Family(start=("<|START_ACTION|>",), end="<|END_ACTION|>", bare_json=False),
    # MiniMax M2's: <invoke name="NAME"> with a <parameter name="KEY">VALUE</parameter> for each argument
    "minimax": _Family(start=("<minimax:tool_call>",), end="</minimax:tool_call>", bare_json=False),
    # MiniCPM 5's: <function name="NAME"> with a <param name="KEY">VALUE</param> for each (CDATA where it must)
    "minicpm": _Family(start=("<function name=",), end="</function>", bare_json=False),
    # Kimi K2's: <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}<|tool_call_end|> for each
    "kimi": _Family(start=("<|tool_calls_section_begin|>",), end="<|tool_calls_section_end|>", bare_json=False),
    "generic": _Family(start=("<tool_call>",), end="</tool_call>", bare_json=True),
}

_ARG_KEYS = ("arguments", "parameters", "args", "input")


def _as_call(obj: Any, names: Collection[str] | None) -> tuple[str, str] | None:
    """(name, arguments JSON) from one decoded call object, or None if it is not a call."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]
    name = obj.get("name", obj.get("tool_name"))  # Cohere's calls name theirs "tool_name"
    if not isinstance(name, str) or not name or (names is not None and name not in names):
        return None
    args: Any = {}
    for key in _ARG_KEYS:
        if key in obj:
            args = obj[key]
            break
    if isinstance(args, str):  # some models write the arguments as JSON inside a string
        try:
            args = json.loads(args, strict=False) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return name, json.dumps(without_surrogates(args), ensure_ascii=False)


def parse_json_calls(text: str, names: Collection[str] | None = None) -> list[tuple[str, str]] | None:
    """Calls from text holding one or more JSON calls: an object, a list of objects, or several
    objects separated by whitespace, ``;`` or ``,``. None unless all of the text is calls. A raw line break or tab
    inside a string (a model writing code into an argument) is taken as its character: the arguments are written
    back as JSON with it escaped."""
    decoder = json.JSONDecoder(strict=False)
    calls: list[tuple[str, str]] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n;,":
            pos += 1
        if pos >= n:
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return None
        for item in obj if isinstance(obj, list) else [obj]:
            call = _as_call(item, names)
            if call is None:
                return None
            calls.append(call)
    return calls or None


def _parse_mistral(text: str, names: Collection[str] | None) -> list[tuple[str, str]] | None:
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        return parse_json_calls(stripped, names)
    calls: list[tuple[str, str]] = []
    for part in stripped.split("[TOOL_CALLS]"):
        part = part.strip()
        if not part:
            continue
        if "[ARGS]" not in part:
            return None
        name, args = part.split("[ARGS]", 1)
        name = name.split("[CALL_ID]", 1)[0].strip()
        parsed = parse_json_calls(json.dumps({"name": name, "arguments": _loads_or_none(args)}), names)
        if parsed is None:
            return None
        calls.extend(parsed)
    return calls or None


def _parse_deepseek(body: str, names: Collection[str] | None) -> list[tuple[str, str]] | None:
    """The calls between DeepSeek's markers (see :data:`DEEPSEEK_CALLS`); None unless the body is calls."""
    calls: list[tuple[str, str]] = []
    for part in body.split(_DEEPSEEK_CALL):
        part = part.split(_DEEPSEEK_CALL_END, 1)[0] if _DEEPSEEK_CALL_END in part else part
        if not part.strip():
            continue
        if _DEEPSEEK_SEP not in part:
            return None
        left, right = part.split(_DEEPSEEK_SEP, 1)
        fenced = re.match(r"\s*([^\n`]+?)\s*\n\s*```(?:json)?\s*\n?(.*?)\s*(?:```\s*)?$", right, re.S)
        if left.strip() in ("function", "") and fenced:  # R1's: the type, then the name and a fenced block
            name, args = fenced.group(1).strip(), fenced.group(2)
        else:  # V3.1's: the name, then the arguments
            name, args = left.strip(), right.strip()
        parsed = parse_json_calls(json.dumps({"name": name, "arguments": _loads_or_none(args) or {}}), names)
        if parsed is None:
            return None
        calls.extend(parsed)
    return calls or None


_NAMED_CALL = re.compile(r"""<(invoke|function)\s+name\s*=\s*["']([^"']+)["']\s*>(.*?)</\1>""", re.S)
_NAMED_PARAMETER = re.compile(r"""<(parameter|param)\s+name\s*=\s*["']([^"']+)["']\s*>(.*?)</\1>""", re.S)
_CDATA = re.compile(r"^\s*<!\[CDATA\[(.*)\]\]>\s*$", re.S)


def _parse_named_elements(body: str, names: Collection[str] | None, schemas: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """Calls written as elements with a ``name`` attribute (``<invoke name=...>`` or ``<function name=...>``),
    an argument in each ``<parameter name=...>`` or ``<param name=...>`` (its text in CDATA or not, typed as in
    :func:`_parse_xml_calls`); None unless the body is calls."""
    calls: list[tuple[str, str]] = []
    for m in _NAMED_CALL.finditer(body):
        name = m.group(2).strip()
        if names is not None and name not in names:
            return None
        props = (schemas.get(name) or {}).get("properties") if isinstance(schemas.get(name), Mapping) else None
        args = {}
        for p in _NAMED_PARAMETER.finditer(m.group(3)):
            key, raw = p.group(2).strip(), p.group(3)
            cdata = _CDATA.match(raw)
            kind = (props or {}).get(key)
            args[key] = cdata.group(1) if cdata else _xml_value(raw.strip("\n"), kind)
        calls.append((name, json.dumps(without_surrogates(args), ensure_ascii=False)))
    return calls if calls and not _NAMED_CALL.sub("", body).strip() else None


def _parse_kimi(body: str, names: Collection[str] | None) -> list[tuple[str, str]] | None:
    """Kimi K2's calls: each ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>ARGUMENTS
    <|tool_call_end|>``; None unless the body is calls."""
    calls: list[tuple[str, str]] = []
    for part in body.split("<|tool_call_begin|>")[1:]:
        head, sep, args = part.split("<|tool_call_end|>", 1)[0].partition("<|tool_call_argument_begin|>")
        if not sep:
            return None
        name = head.strip().removeprefix("functions.").rsplit(":", 1)[0]
        call = parse_json_calls(json.dumps({"name": name, "arguments": _loads_or_none(args) or {}}), names)
        if call is None:
            return None
        calls.extend(call)
    return calls or None


def _parse_name_keyed(body: str, names: Collection[str] | None) -> list[tuple[str, str]] | None:
    """Calls written as a JSON list of one-key objects, ``[{"NAME": {ARGUMENTS}}, ...]``; None unless it is that."""
    items = _loads_or_none(body.strip())
    calls: list[tuple[str, str]] = []
    for item in items if isinstance(items, list) else [items]:
        if not isinstance(item, dict) or len(item) != 1:
            return None
        ((name, args),) = item.items()
        call = parse_json_calls(json.dumps({"name": name, "arguments": args}, ensure_ascii=False), names)
        if call is None:
            return None
        calls.extend(call)
    return calls or None


_JSON_WORDS = {"true": True, "false": False, "null": None}


def _parse_pythonic(body: str, names: Collection[str] | None) -> list[tuple[str, str]] | None:
    """Calls written as Python: ``[name(key=value, ...), ...]`` (or one call alone), each value a literal (JSON's
    true, false and null too). The text is parsed, never run; None unless it is all calls."""
    try:
        tree = ast.parse(body.strip(), mode="eval").body
        calls: list[tuple[str, str]] = []
        for node in tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]:
            if not isinstance(node, ast.Call) or node.args or not isinstance(node.func, (ast.Name, ast.Attribute)):
                return None
            args = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg is not None}
            call = parse_json_calls(json.dumps({"name": ast.unparse(node.func), "arguments": args}), names)
            if call is None:
                return None
            calls.extend(call)
        return calls or None
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def _literal(node: ast.expr) -> Any:
    """A literal's value; JSON's true, false and null as Python's. Raises ValueError for anything else."""
    if isinstance(node, ast.Name) and node.id in _JSON_WORDS:
        return _JSON_WORDS[node.id]
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k) if k is not None else None: _literal(v) for k, v in zip(node.keys, node.values, strict=True)}
    return ast.literal_eval(node)


_GEMMA_QUOTE = '<|"|>'


def _parse_gemma4(body: str, names: Collection[str] | None) -> list[tuple[str, str]] | None:
    """A Gemma 4 call, ``call:NAME{key:value,...}``: keys bare, text between ``<|"|>`` marks, numbers, true, false,
    null, lists and objects as in JSON; None unless that is all the body holds."""
    text = body.strip()
    if not text.startswith("call:") or "{" not in text:
        return None
    name, at = text[5 : text.index("{")].strip(), text.index("{")
    try:
        args, end = _gemma_value(text, at)
    except (ValueError, IndexError):
        return None
    if text[end:].strip() or not isinstance(args, dict):
        return None
    return parse_json_calls(json.dumps({"name": name, "arguments": args}, ensure_ascii=False), names)


def _gemma_value(s: str, i: int) -> tuple[Any, int]:
    """The value that starts at ``s[i]`` (after spaces) and where it ends.

    Raises:
        ValueError: no value starts there.
    """
    while s[i].isspace():
        i += 1
    if s.startswith(_GEMMA_QUOTE, i):
        end = s.index(_GEMMA_QUOTE, i + len(_GEMMA_QUOTE))
        return s[i + len(_GEMMA_QUOTE) : end], end + len(_GEMMA_QUOTE)
    if s[i] in "{[":
        closing, out = ("}", {}) if s[i] == "{" else ("]", [])
        i += 1
        while True:
            while s[i].isspace() or s[i] == ",":
                i += 1
            if s[i] == closing:
                return out, i + 1
            if isinstance(out, dict):
                colon = s.index(":", i)
                key, (value, i) = s[i:colon].strip().strip('"'), _gemma_value(s, colon + 1)
                out[key] = value
            else:
                value, i = _gemma_value(s, i)
                out.append(value)
    j = i
    while j < len(s) and s[j] not in ",}]":
        j += 1
    word = s[i:j].strip()
    if not word:
        raise ValueError("no value")
    try:
        return json.loads(word), j
    except ValueError:
        return word, j


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


# The families whose calls' bodies have a notation of their own (the others hold JSON, or Qwen3-Coder's XML)
_BODIES = {
    "mistral": _parse_mistral, "deepseek": _parse_deepseek, "gemma4": _parse_gemma4, "pythonic": _parse_pythonic,
    "apertus": _parse_name_keyed, "kimi": _parse_kimi,
}  # fmt: skip


def parse_body(
    fmt: str, body: str, names: Collection[str] | None = None, schemas: Mapping[str, Any] | None = None
) -> list[tuple[str, str]] | None:
    """The calls inside one call's markup (or a bare answer), or None when it does not parse. ``schemas``: each
    tool's parameters schema, which types the values of a call written in XML."""
    parse = _BODIES.get(fmt)
    if parse is not None:
        return parse(body, names)
    if fmt in ("minimax", "minicpm"):
        return _parse_named_elements(f"<function name={body}</function>" if fmt == "minicpm" else body, names,
                                     schemas or {})  # fmt: skip
    if fmt != "llama3" and body.lstrip().startswith("<function="):
        return _parse_xml_calls(body, names, schemas or {})
    if fmt != "llama3" and "<arg_key>" in body:
        return _parse_arg_keys(body, names, schemas or {})
    return parse_json_calls(body.strip(), names)


# Qwen3-Coder's calls (and others' after it): <function=NAME> then <parameter=KEY>\nVALUE\n</parameter> for each
_XML_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|\Z)", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S)


def _parse_xml_calls(
    body: str, names: Collection[str] | None, schemas: Mapping[str, Any], *, whole: bool = True
) -> list[tuple[str, str]] | None:
    """Calls written as ``<function=NAME>`` with a ``<parameter=KEY>`` for each argument, each value typed by the
    tool's schema (text where it says string, else read as JSON where it parses); None unless the body is calls
    (``whole``: every function closed)."""
    calls: list[tuple[str, str]] = []
    rest = body
    for m in _XML_FUNCTION.finditer(body):
        name = m.group(1).strip()
        if (names is not None and name not in names) or (whole and not m.group(0).endswith("</function>")):
            return None
        props = (schemas.get(name) or {}).get("properties") if isinstance(schemas.get(name), Mapping) else None
        args = {p.group(1).strip(): _xml_value(p.group(2), (props or {}).get(p.group(1).strip()))
                for p in _XML_PARAMETER.finditer(m.group(2))}  # fmt: skip
        calls.append((name, json.dumps(without_surrogates(args), ensure_ascii=False)))
        rest = rest.replace(m.group(0), "", 1)
    return calls if calls and not rest.strip() else None


# GLM 4.5-4.7's calls: NAME then <arg_key>KEY</arg_key><arg_value>VALUE</arg_value> for each argument
_ARG_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _parse_arg_keys(body: str, names: Collection[str] | None, schemas: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """A call written as GLM writes them: the tool's name, then a key and a value for each argument (typed as in
    :func:`_parse_xml_calls`); None unless that is all the body holds."""
    name, _, pairs = body.partition("<arg_key>")
    name, pairs = name.strip(), "<arg_key>" + pairs
    if not name or (names is not None and name not in names) or _ARG_PAIR.sub("", pairs).strip():
        return None
    props = (schemas.get(name) or {}).get("properties") if isinstance(schemas.get(name), Mapping) else None
    args = {k.strip(): _xml_value(v, (props or {}).get(k.strip())) for k, v in _ARG_PAIR.findall(pairs)}
    return [(name, json.dumps(without_surrogates(args), ensure_ascii=False))]


def _xml_value(text: str, schema: Any) -> Any:
    """A parameter's value: its text less the line breaks around it, as text where its schema says string, else
    the JSON it holds (a number, true, an object) where it parses."""
    value = text.removeprefix("\n").removesuffix("\n")
    kinds = schema.get("type") if isinstance(schema, Mapping) else None
    if kinds == "string" or (isinstance(kinds, list) and "string" in kinds):
        return value
    try:
        return json.loads(value)
    except ValueError:
        lowered = value.strip().lower()
        return {"true": True, "false": False}.get(lowered, value) if kinds == "boolean" else value


_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS = re.compile(r'"(?:arguments|parameters|args|input)"\s*:\s*')


def partial_call(
    body: str, names: Collection[str] | None, fallback: str | None, schemas: Mapping[str, Any] | None = None
) -> tuple[str, str] | None:
    """(name, the arguments' text so far) of a JSON call cut short by the token limit, as OpenAI returns such a
    call: its arguments as far as they were written. The name is the body's, else ``fallback`` (the one tool a
    request offered or forced); None when neither names an offered tool. A call written in XML gives the
    parameters written so far."""
    if body.lstrip().startswith("<function="):
        cut = _parse_xml_calls(body, names, schemas or {}, whole=False)
        return cut[0] if cut else None
    m = _NAME.search(body)
    name = json.loads(f'"{m.group(1)}"') if m else fallback
    if not name or (names is not None and name not in names):
        return None
    a = _ARGS.search(body)
    if a is None:
        return name, ""
    args = body[a.end() :].rstrip()
    try:  # arguments written whole, the call's own object cut after them: the arguments alone, not its brace
        _, end = json.JSONDecoder().raw_decode(args)
    except ValueError:
        return name, args
    return name, args[:end]


def _same_arguments(a: str, b: str) -> bool:
    """Whether two calls' arguments are the same: equal as JSON (key order and spacing aside), else as text."""
    if a == b:
        return True
    try:
        return json.loads(a) == json.loads(b)
    except (ValueError, RecursionError):
        return False


def _held_prefix(buf: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of ``buf`` that could begin one of ``markers``."""
    hold = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(buf)), 0, -1):
            if buf.endswith(m[:k]):
                hold = max(hold, k)
                break
    return hold


class ToolCallParser:
    """Streams content and tool calls out of answer text in one family's format.

    Args:
        fmt: The family: ``hermes``, ``llama3``, ``mistral`` or ``generic``.
        tool_names: The offered tools; a call naming another is kept as text (None accepts any name).
        forced: The tool the request forces the answer to call (a call cut before its name calls it).
        calls_only: Whether the answer must be calls (a forced tool choice's grammar): an opening marker cut
            short by the token limit is a call's markup, never text.
        bare: Whether a JSON answer on its own may be a call, in the families that write calls so (not where a
            response format asked for JSON: the answer is then that JSON).
        schemas: Each offered tool's parameters schema, which types a call written in XML (Qwen3-Coder's).

    ``feed`` and ``finish`` return :class:`ParsedOutput`; ``calls`` holds every call so far.
    """

    def __init__(
        self, fmt: str = "generic", tool_names: Collection[str] | None = None, *, forced: str | None = None, bare: bool = True,
        calls_only: bool = False, schemas: Mapping[str, Any] | None = None,
    ) -> None:
        if fmt not in FAMILIES:
            raise ValueError(f"unknown tool-call format {fmt!r}")
        self.fmt = fmt
        self.family = FAMILIES[fmt]
        self.bare = bare and self.family.bare_json  # whether a JSON answer alone may be a call
        self.names = set(tool_names) if tool_names is not None else None
        self.schemas = dict(schemas or {})
        self.calls: list[ToolCall] = []
        self._buf = ""  # text not yet decided
        self._state = "start"  # start -> text | markup | bare
        self._marker = ""  # the marker that opened the markup being read
        self._space = ""  # whitespace after a call, shown only if more text follows
        self._cut = False  # the answer ended at the token limit: a call being written is a call cut short
        self._forced = forced
        self._calls_only = calls_only or forced is not None
        self.repeated = False  # a call repeated one made before it: the answer ends there (see _emit_calls)

    # -- feeding --------------------------------------------------------------------------------
    def feed(self, text: str) -> ParsedOutput:
        self._buf += text
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        self._advance(content, deltas, final=False)
        return ParsedOutput("".join(content), tuple(deltas))

    def finish(self, *, cut: bool = False) -> ParsedOutput:
        """Everything still held back, at the end of the answer. ``cut``: it ended at the token limit, so a
        call whose markup was opened is reported with the arguments written so far (never as text)."""
        self._cut = cut
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        self._advance(content, deltas, final=True)
        return ParsedOutput("".join(content), tuple(deltas))

    def _fallback_name(self) -> str | None:
        """The tool a call cut before its name must be calling: the one forced, or the only one offered."""
        if self._forced is not None:
            return self._forced
        return next(iter(self.names)) if self.names is not None and len(self.names) == 1 else None

    # -- the state machine ----------------------------------------------------------------------
    def _emit_text(self, text: str, content: list[str]) -> None:
        if not text:
            return
        if self.calls and not text.strip():
            self._space += text
            return
        content.append(self._space + text)
        self._space = ""

    def _emit_calls(self, calls: list[tuple[str, str]], deltas: list[ToolCallDelta]) -> None:
        for name, args in calls:
            if any(c.name == name and _same_arguments(c.arguments, args) for c in self.calls):
                # A call the answer already made, made again: a model held to calls (a forced choice's grammar
                # that allows another) can write the same ones until its token limit, and a client would run
                # the tool twice for one result. The answer ends with the calls before it.
                self.repeated = True
                self._buf = ""
                return
            call = ToolCall(name=name, arguments=args, id=new_call_id())
            index = len(self.calls)
            self.calls.append(call)
            deltas.append(ToolCallDelta(index=index, id=call.id, name=name, arguments=""))
            deltas.append(ToolCallDelta(index=index, arguments=args))
        self._space = ""

    def _advance(self, content: list[str], deltas: list[ToolCallDelta], *, final: bool) -> None:
        fam = self.family
        while not self.repeated:
            if self._state == "start":
                stripped = self._buf.lstrip()
                if not stripped and not final:
                    return
                if not final and any(m.startswith(stripped) and m != stripped for m in fam.start):
                    return  # could still be a marker: wait for more
                if any(stripped.startswith(m) for m in fam.start):
                    self._state = "text"
                    continue
                if self.bare and stripped[:1] in ("{", "["):
                    self._state = "bare"
                    continue
                self._state = "text"
                continue
            if self._state == "bare":
                if not final:
                    return
                calls = parse_body(self.fmt, self._buf, self.names, self.schemas)
                if calls is None and self._cut:
                    cut = partial_call(self._buf, self.names, self._fallback_name(), self.schemas)
                    calls = [cut] if cut is not None else None
                if calls is None:
                    self._emit_text(self._buf, content)
                else:
                    self._emit_calls(calls, deltas)
                self._buf = ""
                return
            if self._state == "text":
                first, marker = -1, ""
                for m in fam.start:
                    i = self._buf.find(m)
                    if i != -1 and (first == -1 or i < first):
                        first, marker = i, m
                if first == -1:
                    if final and self._cut and self._calls_only and (opened := _held_prefix(self._buf, fam.start)):
                        # the limit fell inside the opening marker: a call cut before its name (the forced one)
                        before, self._buf = self._buf[: len(self._buf) - opened], ""
                        if before.strip():
                            self._emit_text(before, content)
                        cut = partial_call("", self.names, self._fallback_name())
                        if cut is not None:
                            self._emit_calls([cut], deltas)
                        return
                    hold = 0 if final else _held_prefix(self._buf, fam.start)
                    self._emit_text(self._buf[: len(self._buf) - hold], content)
                    self._buf = self._buf[len(self._buf) - hold :]
                    return
                self._emit_text(self._buf[:first], content)
                self._buf = self._buf[first + len(marker) :]
                self._marker = marker
                self._state = "markup"
                continue
            # markup: a call's body, up to the end marker or the end of the answer
            if fam.end is not None:
                j = self._buf.find(fam.end)
                if j == -1 and not final:
                    return
                body = self._buf if j == -1 else self._buf[:j]
                rest = "" if j == -1 else self._buf[j + len(fam.end) :]
                closing = "" if j == -1 else fam.end
            else:
                if not final:
                    return
                body, rest, closing = self._buf, "", ""
            if self._cut and not closing and fam.end is not None:  # the limit fell inside the end marker
                body = body[: len(body) - _held_prefix(body, (fam.end,))]
            calls = parse_body(self.fmt, body, self.names, self.schemas)
            if calls is None and self._cut and not closing:  # the limit fell inside the call's markup
                cut = partial_call(body, self.names, self._fallback_name(), self.schemas)
                if cut is not None:
                    self._emit_calls([cut], deltas)
                # else the markup is dropped: a call too short to name its tool is not an answer either
            elif calls is None:
                self._emit_text(self._marker + body + closing, content)
            else:
                self._emit_calls(calls, deltas)
            self._buf = rest
            self._state = "text"
            if final and not rest:
                return


def parse_tool_calls_text(fmt: str, text: str, tool_names: Collection[str] | None = None) -> tuple[str, list[ToolCall]]:
    """A whole answer split into its content and its tool calls (the non-streamed path)."""
    parser = ToolCallParser(fmt, tool_names)
    a, b = parser.feed(text), parser.finish()
    return a.content + b.content, list(parser.calls)


__all__ = [
    "ToolFormat",
    "TOOL_FORMATS",
    "ToolCallDelta",
    "ParsedOutput",
    "ToolCallParser",
    "parse_json_calls",
    "parse_body",
    "partial_call",
    "parse_tool_calls_text",
]
