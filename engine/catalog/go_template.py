"""Ollama's Go chat templates translated to Jinja, for the forms Ollama's own models use.

Ollama renders a model's ``template`` layer with Go's text/template in one of two ways:

* a template that mentions ``.Messages`` is run once, with ``.System`` (the system messages, joined),
  ``.Messages`` (every message, system ones included) and ``.Response`` empty;
* an older one is run once per turn with ``.System``, ``.Prompt`` and ``.Response``, and for the last
  turn everything after ``{{ .Response }}`` is cut, so the prompt ends where the answer begins.

Both are mirrored here. Supported: text with ``{{-``/``-}}`` trimming, fields (``.System``, ``.Prompt``,
``.Response``, ``.Messages``, ``.Role``, ``.Content``, ``$.X``), ``if``/``else if``/``else``/``end``,
``range .Messages`` (also ``range $i, $m := .Messages``), ``$x := ...`` and the functions ``eq ne lt le gt
ge and or not len slice``. ``.Tools``, ``.ToolCalls`` and the thinking fields count as empty (Hearth passes
no tools to a translated template), so what depends on them drops out. Anything else raises
:class:`UnsupportedTemplate`, and the caller uses the GGUF's own Jinja template instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

MAX_TEMPLATE_CHARS = 32 * 1024  # Ollama's own templates are under 4 KB
_MAX_NODES = 2000
_MAX_DEPTH = 32

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<raw>`[^`]*`)
    | (?P<num>-?\d+(?:\.\d+)?)
    | (?P<assign>:=|=)
    | (?P<punct>[(),|])
    | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
# Fields Hearth never passes to a translated template: empty, as in Ollama when a request has none.
_EMPTY_FIELDS = {"Tools", "ToolCalls", "Think", "ThinkLevel", "IsThinkSet", "Suffix", "Images", "Thinking", "ToolName"}
_ROOT_FIELDS = {"System": "ol_system", "Prompt": "ol_prompt", "Response": "ol_response", "Messages": "messages"}
_MESSAGE_FIELDS = {"Role": "role", "Content": "content"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


class UnsupportedTemplate(ValueError):
    """The Go template uses something this translator does not know."""


@dataclass(slots=True)
class _Node:
    kind: str  # text | out | if | range | set
    text: str = ""
    branches: list[tuple[str, list[_Node]]] = field(default_factory=list)  # if: (condition, body); range: ("", body)
    else_body: list[_Node] | None = None
    names: tuple[str, ...] = ()  # range's $index, $element; set's variable


@dataclass(frozen=True, slots=True)
class _Expr:
    code: str
    empty: bool = False  # known to be empty/false whatever the request


@dataclass(frozen=True, slots=True)
class Translation:
    """A Go template as Jinja, and whether it is a per-message (``.Messages``) template."""

    jinja: str
    uses_messages: bool


# -- parsing -------------------------------------------------------------------------------------


def _segments(source: str) -> list[tuple[str, str]]:
    """``("text", ...)`` and ``("action", ...)`` pieces, Go's trim markers applied to the text."""
    out: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for m in _ACTION.finditer(source):
        text = source[pos : m.start()]
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if m.group(1):
            text = text.rstrip(" \t\r\n")
        if text:
            out.append(("text", text))
        out.append(("action", m.group(2).strip()))
        trim_next = bool(m.group(3))
        pos = m.end()
    text = source[pos:]
    if trim_next:
        text = text.lstrip(" \t\r\n")
    if "{{" in text:
        raise UnsupportedTemplate("an action is not closed")
    if text:
        out.append(("text", text))
    return out


def _parse(source: str) -> list[_Node]:
    root: list[_Node] = []
    stack: list[tuple[_Node | None, list[_Node]]] = [(None, root)]
    count = 0
    for kind, value in _segments(source):
        count += 1
        if count > _MAX_NODES:
            raise UnsupportedTemplate("the template is too long")
        body = stack[-1][1]
        if kind == "text":
            body.append(_Node("text", text=value))
            continue
        if value.startswith("/*"):
            continue
        word, _, rest = value.partition(" ")
        rest = rest.strip()
        if word == "if":
            node = _Node("if", branches=[(rest, [])])
            body.append(node)
            stack.append((node, node.branches[0][1]))
        elif word == "else":
            node = stack[-1][0]
            if node is None or node.kind != "if" or node.else_body is not None:
                raise UnsupportedTemplate("an 'else' outside an 'if'")
            if rest.startswith("if "):
                node.branches.append((rest[3:].strip(), []))
                stack[-1] = (node, node.branches[-1][1])
            elif rest:
                raise UnsupportedTemplate(f"'else {rest}'")
            else:
                node.else_body = []
                stack[-1] = (node, node.else_body)
        elif word == "range":
            names, _, target = rest.rpartition(":=")
            node = _Node("range", branches=[(target.strip(), [])], names=tuple(n.strip() for n in names.split(",") if n.strip()))
            body.append(node)
            stack.append((node, node.branches[0][1]))
        elif word == "end":
            if len(stack) == 1:
                raise UnsupportedTemplate("an 'end' with nothing open")
            stack.pop()
        elif word in ("with", "template", "define", "block", "break", "continue"):
            raise UnsupportedTemplate(f"'{word}'")
        elif re.match(r"^\$[A-Za-z0-9_]*\s*:?=", value):
            name, _, expr = value.partition("=")
            body.append(_Node("set", text=expr.strip(), names=(name.rstrip(":").strip(),)))
        else:
            body.append(_Node("out", text=value))
        if len(stack) > _MAX_DEPTH:
            raise UnsupportedTemplate("blocks nest too deeply")
    if len(stack) != 1:
        raise UnsupportedTemplate("a block is not closed with 'end'")
    return root


# -- expressions ---------------------------------------------------------------------------------


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UnsupportedTemplate(f"cannot read {text[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Scope:
    def __init__(self, dot: str | None) -> None:
        self.dot = dot  # the Jinja name of the message `.` stands for inside a range, None at the top
        self.variables: dict[str, str] = {}


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


class _ExprParser:
    def __init__(self, tokens: list[tuple[str, str]], scope: _Scope) -> None:
        self.tokens, self.i, self.scope = tokens, 0, scope

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise UnsupportedTemplate("an expression ends early")
        self.i += 1
        return tok

    def command(self, *, closing: str | None = None) -> _Expr:
        """A function call with its arguments, or a single operand."""
        tok = self.peek()
        if tok is not None and tok[0] == "ident" and tok[1] not in ("true", "false", "nil"):
            self.take()
            args = []
            while (nxt := self.peek()) is not None and nxt[1] != closing:
                if nxt[1] == "|":
                    raise UnsupportedTemplate("pipelines")
                args.append(self.operand())
            return _call(tok[1], args)
        expr = self.operand()
        if (nxt := self.peek()) is not None and nxt[1] != closing:
            raise UnsupportedTemplate("more than one value in an action")
        return expr

    def operand(self) -> _Expr:
        kind, text = self.take()
        if text == "(":
            expr = self.command(closing=")")
            if self.take()[1] != ")":
                raise UnsupportedTemplate("an unclosed '('")
            return expr
        if kind == "str":
            return _Expr(_literal(json.loads(text)), empty=text == '""')
        if kind == "raw":
            return _Expr(_literal(text[1:-1]), empty=text == "``")
        if kind == "num":
            return _Expr(text, empty=float(text) == 0)
        if kind == "ident":
            if text in ("false", "nil"):
                return _Expr("false", empty=True)
            if text == "true":
                return _Expr("true")
            return _call(text, [])
        if kind == "field":
            return self.field(text)
        if kind == "var":
            return self.variable(text)
        raise UnsupportedTemplate(f"'{text}'")

    def field(self, text: str, *, root: bool = False) -> _Expr:
        if text == ".":
            if root or self.scope.dot is None:
                raise UnsupportedTemplate("'.' outside a range")
            return _Expr(self.scope.dot)
        parts = text.lstrip(".").split(".")
        name = parts[0]
        if name in _EMPTY_FIELDS:
            return _Expr('""', empty=True)
        if len(parts) > 1:
            raise UnsupportedTemplate(f"'{text}'")
        if not root and self.scope.dot is not None:
            if name not in _MESSAGE_FIELDS:
                raise UnsupportedTemplate(f"the message field '{text}'")
            return _Expr(f"{self.scope.dot}.{_MESSAGE_FIELDS[name]}")
        if name not in _ROOT_FIELDS:
            raise UnsupportedTemplate(f"the field '{text}'")
        return _Expr(_ROOT_FIELDS[name])

    def variable(self, text: str) -> _Expr:
        name, _, rest = text.partition(".")
        if name == "$":
            return self.field("." + rest, root=True)
        if name not in self.scope.variables:
            raise UnsupportedTemplate(f"the variable '{name}'")
        if rest:
            if rest not in _MESSAGE_FIELDS:
                raise UnsupportedTemplate(f"'{text}'")
            return _Expr(f"{self.scope.variables[name]}.{_MESSAGE_FIELDS[rest]}")
        return _Expr(self.scope.variables[name])


def _call(name: str, args: list[_Expr]) -> _Expr:
    if name in _COMPARE:
        if len(args) < 2 or (name != "eq" and len(args) != 2):
            raise UnsupportedTemplate(f"'{name}' with {len(args)} arguments")
        op = _COMPARE[name]
        return _Expr("(" + " or ".join(f"{args[0].code} {op} {b.code}" for b in args[1:]) + ")")
    if name == "and":
        if not args:
            raise UnsupportedTemplate("'and' with no arguments")
        if any(a.empty for a in args):
            return _Expr("false", empty=True)
        return _Expr("(" + " and ".join(a.code for a in args) + ")")
    if name == "or":
        live = [a for a in args if not a.empty]
        if not live:
            return _Expr("false", empty=True)
        return _Expr("(" + " or ".join(a.code for a in live) + ")")
    if name == "not" and len(args) == 1:
        return _Expr("true") if args[0].empty else _Expr(f"(not {args[0].code})")
    if name == "len" and len(args) == 1:
        return _Expr("0", empty=True) if args[0].empty else _Expr(f"({args[0].code}|length)")
    if name == "slice" and len(args) in (2, 3):
        if args[0].empty:
            return args[0]
        end = args[2].code if len(args) == 3 else ""
        return _Expr(f"{args[0].code}[{args[1].code}:{end}]")
    raise UnsupportedTemplate(f"the function '{name}'")


def _expr(text: str, scope: _Scope) -> _Expr:
    parser = _ExprParser(_tokens(text), scope)
    expr = parser.command()
    if parser.peek() is not None:
        raise UnsupportedTemplate(f"'{text}'")
    return expr


# -- emitting Jinja ------------------------------------------------------------------------------


class _Emitter:
    def __init__(self, *, cut_after_response: bool) -> None:
        self.cut_after_response = cut_after_response
        self.cut = False  # a {{ .Response }} was emitted: what follows is left out of the last turn
        self.loops = 0

    def body(self, nodes: list[_Node], scope: _Scope) -> str:
        parts: list[str] = []
        for i, node in enumerate(nodes):
            before = self.cut
            parts.append(self.node(node, scope))
            if self.cut_after_response and self.cut and not before:
                rest = self.body(nodes[i + 1 :], scope)
                if rest:
                    parts.append("{%- if not ol_last -%}" + rest + "{%- endif -%}")
                break
        return "".join(parts)

    def node(self, node: _Node, scope: _Scope) -> str:
        if node.kind == "text":
            return "{{ " + _literal(node.text) + " }}"
        if node.kind == "out":
            expr = _expr(node.text, scope)
            if expr.code == "ol_response":
                self.cut = True
            return "" if expr.empty else "{{ " + expr.code + " }}"
        if node.kind == "set":
            var = "ol_v_" + node.names[0].lstrip("$")
            code = _expr(node.text, scope).code
            scope.variables[node.names[0]] = var
            return "{%- set " + var + " = " + code + " -%}"
        if node.kind == "if":
            out, opened = [], False
            for cond_text, body in node.branches:
                cond = _expr(cond_text, scope)
                if cond.empty:
                    continue
                out.append(("{%- elif " if opened else "{%- if ") + cond.code + " -%}" + self.body(body, scope))
                opened = True
            else_text = self.body(node.else_body, scope) if node.else_body is not None else ""
            if not opened:
                return else_text
            if else_text:
                out.append("{%- else -%}" + else_text)
            return "".join(out) + "{%- endif -%}"
        return self.range(node, scope)

    def range(self, node: _Node, scope: _Scope) -> str:
        target = _expr(node.branches[0][0], scope)
        if target.empty:
            return ""
        if target.code != "messages" or scope.dot is not None:
            raise UnsupportedTemplate("a range over anything but .Messages")
        self.loops += 1
        inner = _Scope(f"ol_m{self.loops}")
        inner.variables = dict(scope.variables)
        head = ""
        names = node.names
        if len(names) > 2:
            raise UnsupportedTemplate("a range with more than two variables")
        if len(names) == 2:
            inner.variables[names[0]] = f"ol_i{self.loops}"
            head = "{%- set " + f"ol_i{self.loops}" + " = loop.index0 -%}"
        if names:
            inner.variables[names[-1]] = inner.dot or ""
        return "{%- for " + (inner.dot or "") + " in messages -%}" + head + self.body(node.branches[0][1], inner) + "{%- endfor -%}"


def translate(source: str, *, default_system: str | None = None) -> Translation:
    """Jinja for Ollama's Go template ``source``.

    Args:
        source: The ``template`` layer's text.
        default_system: The ``system`` layer's text, used when a conversation has no system message
            (as Ollama does).

    Raises:
        UnsupportedTemplate: the template is too long or uses a form this translator does not know.
    """
    if len(source) > MAX_TEMPLATE_CHARS:
        raise UnsupportedTemplate(f"the template is over {MAX_TEMPLATE_CHARS} characters")
    nodes = _parse(source)
    uses_messages = bool(re.search(r"\.Messages\b", source))
    head = ""
    if default_system:
        head = (
            "{%- if not (messages|selectattr('role', 'equalto', 'system')|list) -%}"
            "{%- set messages = [{'role': 'system', 'content': " + _literal(default_system) + "}] + messages -%}"
            "{%- endif -%}"
        )
    if uses_messages:
        body = _Emitter(cut_after_response=False).body(nodes, _Scope(None))
        return Translation(
            head
            + "{%- set ol_system = messages|selectattr('role', 'equalto', 'system')|map(attribute='content')|join('\\n\\n') -%}"
            + "{%- set ol_prompt = '' -%}{%- set ol_response = '' -%}"
            + body,
            uses_messages=True,
        )
    body = _Emitter(cut_after_response=True).body(nodes, _Scope(None))
    # One run of the template per turn, as Ollama does: a system or user message after an answer
    # starts the next turn; the last turn is cut after {{ .Response }}.
    turns = (
        "{%- macro ol_turn(ol_system, ol_prompt, ol_response, ol_last) -%}" + body + "{%- endmacro -%}"
        "{%- set ol = namespace(system='', prompt='', response='') -%}"
        "{%- for m in messages -%}"
        "{%- if m.role == 'system' -%}"
        "{%- if ol.prompt or ol.response -%}{{ ol_turn(ol.system, ol.prompt, ol.response, false) }}"
        "{%- set ol.prompt = '' -%}{%- set ol.response = '' -%}{%- endif -%}"
        "{%- set ol.system = m.content -%}"
        "{%- elif m.role == 'user' -%}"
        "{%- if ol.response -%}{{ ol_turn(ol.system, ol.prompt, ol.response, false) }}"
        "{%- set ol.system = '' -%}{%- set ol.response = '' -%}{%- endif -%}"
        "{%- set ol.prompt = m.content -%}"
        "{%- elif m.role == 'assistant' -%}{%- set ol.response = m.content -%}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{{ ol_turn(ol.system, ol.prompt, ol.response, true) }}"
    )
    return Translation(head + turns, uses_messages=False)


__all__ = ["MAX_TEMPLATE_CHARS", "Translation", "UnsupportedTemplate", "translate"]
