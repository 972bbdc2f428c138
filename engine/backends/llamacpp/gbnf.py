"""JSON schemas as llama.cpp grammars (GBNF): llama-cpp-python's converter, with each enum written as a trie.

The converter writes an enum as one alternative per value. llama.cpp's matcher keeps a parse stack per
alternative that still matches the output so far, and checks every token against each: 2,400 values that
share a prefix cost 45 ms per accepted token and over a second per whole-vocabulary mask. As a trie, values
that share a prefix share one path, so a step checks only the branches open where the output is (the digits
after a common prefix: ten). Each branching node is a rule of its own, referenced at the end of its parent's
alternative, so neither llama.cpp's parser nor its stacks grow with the trie's depth.

The schema must already be within engine.schema_limits: this module builds, it does not bound.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_END = ""  # the key of a trie node that marks the end of a value (children are keyed by one character)


def schema_to_gbnf(schema: Mapping[str, Any]) -> str:
    """The GBNF of ``schema`` (rule ``root``).

    Raises:
        Exception: the converter's own (bare exceptions, assertion errors) for what it cannot read.
    """
    from llama_cpp.llama_grammar import RESERVED_NAMES, SchemaConverter

    class TrieEnums(SchemaConverter):
        def _format_literal(self, literal):  # noqa: ANN001, ANN202 - the base class's signature
            # The base escapes quotes but not backslashes, so a constant or property name written by
            # json.dumps ("\u0000") came out as a GBNF escape (a NUL no token can write: llama.cpp then
            # aborted the process) or as a literal that ends too early.
            return gbnf_literal(literal)

        def _visit_pattern(self, pattern, name):  # noqa: ANN001, ANN202 - the base class's signature
            return super()._visit_pattern(gbnf_pattern(pattern), name)

        def visit(self, schema, name):  # noqa: ANN001 - the base class's signature
            if _plain_enum(schema):
                rule_name = name + "-" if name in RESERVED_NAMES else name or "root"  # as the converter names it
                body = enum_rule(schema["enum"], lambda suffix, rule: self._add_rule(f"{rule_name}-{suffix}", rule))
                return self._add_rule(rule_name, body)
            return super().visit(schema, name)

    converter = TrieEnums(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    resolved = converter.resolve_refs(json.loads(json.dumps(schema)), "stdin")
    converter.visit(resolved, "")
    return converter.format_grammar()


def _plain_enum(schema: Any) -> bool:
    """Whether the converter would write ``schema`` as its enum alone (what it checks before an enum comes first)."""
    return (
        isinstance(schema, Mapping)
        and isinstance(schema.get("enum"), list)
        and bool(schema["enum"])
        and not any(k in schema for k in ("$ref", "oneOf", "anyOf", "const"))
        and not isinstance(schema.get("type"), list)
    )


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal that matches exactly it (control characters written as escapes)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


# A regex's escapes that GBNF reads as they are (the converter copies an escape it has no rule for into the
# grammar, where any other is an error: \d and \. made "could not be parsed" of the commonest patterns).
_GBNF_ESCAPES = frozenset('xuUtrn\\"[]')
_CONVERTER_ESCAPES = frozenset("[]()|{}*+?")  # outside a class the converter writes these as literal characters
# \s as a space: a raw tab or line break inside a JSON string is not JSON. A negation leaves out what would end
# the string or break it (a quote, a backslash, control characters) as well.
_CLASSES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " "}
_NOT_IN_A_STRING = '"\\\\\\x01-\\x1F'


def gbnf_pattern(pattern: str) -> str:
    """``pattern`` with the escapes GBNF cannot read rewritten as ones it can: ``\\d``, ``\\w`` and ``\\s`` (and
    their negations outside a class) as classes, an escaped punctuation character as its ``\\xHH``. Other
    escapes (``\\b``, back-references) are left for the converter or llama.cpp to refuse."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            i += 2
            if e in _GBNF_ESCAPES or (not in_class and e in _CONVERTER_ESCAPES):
                out.append("\\" + e)
            elif e.lower() in _CLASSES and not (in_class and e.isupper()):
                chars = _CLASSES[e.lower()]
                out.append(chars if in_class else f"[^{chars}{_NOT_IN_A_STRING}]" if e.isupper() else f"[{chars}]")
            elif not e.isalnum() and e.isascii():  # a class of one outside a class: the converter copies it whole
                out.append(f"\\x{ord(e):02X}" if in_class else f"[\\x{ord(e):02X}]")
            else:
                out.append("\\" + e)
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class and not (out and out[-1] in ("[", "[^")):
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def enum_rule(values: list[Any], add_rule) -> str:  # noqa: ANN001 - (suffix, rule text) -> rule name
    """The body of a rule matching exactly the JSON texts of ``values``, branching nodes as rules of their own.

    Args:
        values: The enum's values, each written as ``json.dumps`` writes it (as the converter writes a constant).
        add_rule: Adds a rule by a name suffix and its text, and returns the rule's name.
    """
    root: dict[str, dict] = {}
    for text in dict.fromkeys(json.dumps(v) for v in values):
        node = root
        for ch in text:
            node = node.setdefault(ch, {})
        node[_END] = {}
    names: dict[int, str] = {}  # id of a branching node -> its rule's name
    order: list[dict] = []  # branching nodes, parents before children
    todo = [root]
    while todo:
        node = todo.pop()
        order.append(node)
        for ch in node:
            end = _run(node[ch])[1] if ch != _END else {}
            if any(k != _END for k in end):  # a branching node: a rule of its own
                todo.append(end)
    for node in reversed(order[1:]):  # children first, so a parent can name them
        names[id(node)] = add_rule(str(len(names) + 1), " | ".join(_alternatives(node, names)))
    return " | ".join(_alternatives(root, names))


def _run(node: dict) -> tuple[str, dict]:
    """The characters from ``node`` down its single-child path, and the node where that path ends."""
    chars = []
    while len(node) == 1 and _END not in node:
        ch = next(iter(node))
        chars.append(ch)
        node = node[ch]
    return "".join(chars), node


def _alternatives(node: dict, names: dict[int, str]) -> list[str]:
    out = []
    for ch, child in node.items():
        if ch == _END:
            continue
        rest, end = _run(child)
        literal = gbnf_literal(ch + rest)
        if set(end) == {_END}:
            out.append(literal)
        elif _END in end:  # a value ends here and others go on (1 and 12)
            out.append(f"{literal} {names[id(end)]}?")
        else:
            out.append(f"{literal} {names[id(end)]}")
    return out


__all__ = ["schema_to_gbnf", "enum_rule", "gbnf_literal", "gbnf_pattern"]
