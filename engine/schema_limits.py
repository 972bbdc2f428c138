"""The bounds of a JSON schema that becomes a grammar (docs/api.md, "Limits").

A schema in a request (``response_format``, Ollama's ``format``, a forced tool's parameters) becomes a
grammar the decode thread runs at every step: GBNF on the llama.cpp backend, llguidance on the paged and
MLX ones. Every bound is checked before either is built (by the engine types and again by each grammar
builder), the same for every backend, and a schema over one is a 400 that names it. llguidance takes far
more than these; the bounds are where GBNF still builds a grammar quickly and masks a step's vocabulary in
tens of milliseconds (benchmarks/schema_limits.py measures each):

- A count (``maxLength``, ``maxItems`` ...): the converter writes ``{0,n}`` as n nested optional groups.
  llama.cpp's parser refuses more than 1,000 of them in one rule, and past about 20,000 it recursed off its
  stack and the worker died. The sum over the schema bounds the grammar's size (20 strings of 1,000:
  a 160 KB grammar, built in 0.08 s).
- Alternatives open at one place (``anyOf`` in ``anyOf``): each is a parse stack that every token is
  checked against, so nested lists multiply (100: a whole-vocabulary mask in about 0.08 s).
- Properties of one object: the converter writes the optional ones as alternatives, in time that grows as
  the square of their count, and past about 1,000 it overflows Python's recursion.
- Enums: written as a trie on llama.cpp (engine/backends/llamacpp/gbnf.py), so values sharing a prefix cost
  one stack; the count and size keep the grammar small.
- A regex's nested repetition (engine/pattern_shape.py): can be read in combinatorially many ways, and one
  step's mask took minutes in a single C call that nothing can interrupt.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from typing import Any

from engine.errors import InvalidRequest, SchemaTooComplex
from engine.pattern_shape import pattern_shape

MAX_SCHEMA_BYTES = 65_536  # the schema as compact JSON
MAX_SCHEMA_DEPTH = 32  # nested objects, arrays and combinators
MAX_PATTERN_LENGTH = 512  # characters of one `pattern`
MAX_REPETITION = 1_000  # the product of nested repetition bounds in one pattern
# How often a group that can match nothing may repeat, nested repetitions around it multiplied: the one
# shape that multiplies GBNF's parse stacks (measured on the starter's vocabulary, one whole-vocabulary
# mask: (a{0,10}){0,10} 0.05 s, (a{0,2}){0,50} 2.8 s, (a?){0,100} 9.5 s, (a{0,50}){0,50} minutes;
# (a{1,50}){0,50}, (a+)+ and (a*)* under 0.02 s).
MAX_EMPTY_REPEATS = 10
MAX_COUNT = 1_000  # each of COUNT_KEYS: llama.cpp parses 1,000 nested optional groups in one rule, not 1,001
MAX_COUNTS_TOTAL = 20_000  # the counts of the whole schema added up, patterns' repetitions included
MAX_PROPERTIES = 100  # of one object, the parts of its allOf together
MAX_ALTERNATIVES = 100  # open at one place: anyOf, oneOf and type lists, nested ones multiplied
MAX_ENUM_VALUES = 1_000  # the values of every enum of the schema together
MAX_ENUM_BYTES = 16_384  # one enum's values as compact JSON

# (minimum, maximum) pairs: a pair adds its larger count to the total, the size of its grammar.
COUNT_PAIRS = (("minLength", "maxLength"), ("minItems", "maxItems"), ("minProperties", "maxProperties"))
COUNT_KEYS = tuple(key for pair in COUNT_PAIRS for key in pair)

_MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST_KEYS = ("allOf", "prefixItems")
_ALTERNATIVE_KEYS = ("anyOf", "oneOf")
_ONE_KEYS = ("items", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames",
             "additionalProperties", "unevaluatedProperties", "unevaluatedItems")  # fmt: skip


def check_schema(schema: Any, *, param: str, what: str = "The output's JSON schema") -> None:
    """Refuse a JSON schema whose grammar would be too large or too slow to build or to match.

    Args:
        schema: The schema (a mapping; anything else is left to the grammar compiler to refuse).
        param: The request field it came in (the error's ``param``).
        what: The schema as the error's sentence names it.

    Raises:
        SchemaTooComplex: the schema is over one of this module's bounds (the message names it).
    """
    if not isinstance(schema, Mapping):
        return
    try:
        size = len(json.dumps(schema, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        raise SchemaTooComplex(f"{what} is not plain JSON; send a JSON object.", param) from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaTooComplex(f"{what} is {size} bytes, over the limit of {MAX_SCHEMA_BYTES}; simplify it.", param)
    walk = _SchemaWalk(schema, param, what)
    walk.visit(schema, 0, 1)
    if walk.counts > MAX_COUNTS_TOTAL:
        raise SchemaTooComplex(
            f"{what} asks for {walk.counts} repetitions in all (its lengths, item and property counts and pattern "
            f"repetitions added up), over the limit of {MAX_COUNTS_TOTAL}; lower some of them.",
            param,
        )


class _SchemaWalk:
    """One pass over a schema's sub-schemas, adding up what is bounded for the whole schema."""

    def __init__(self, root: Mapping[str, Any], param: str, what: str) -> None:
        self.root, self.param, self.what = root, param, what
        self.counts = 0  # see MAX_COUNTS_TOTAL
        self.enum_values = 0
        self.path: list[Mapping[str, Any]] = []  # the sub-schemas from the root to the one being visited
        self.on_path: dict[int, int] = {}  # id of a sub-schema on the path -> its place there
        self.followed: set[tuple[int, int]] = set()  # (referenced sub-schema, alternatives open) already visited
        self.counting = True  # off while a reference is followed: its sub-schema's counts are added where it is defined
        self.first_memo: dict[int, frozenset[str] | None] = {}  # see _first_chars

    def refuse(self, sentence: str) -> SchemaTooComplex:
        return SchemaTooComplex(f"{self.what} {sentence}", self.param)

    def visit(self, node: Any, depth: int, open_alternatives: int) -> None:
        """Check ``node``; ``open_alternatives`` is how many alternatives are open where it starts."""
        if not isinstance(node, Mapping):
            return
        if depth > MAX_SCHEMA_DEPTH:
            raise self.refuse(f"nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it.")
        if id(node) in self.on_path:
            return
        self.on_path[id(node)] = len(self.path)
        self.path.append(node)
        try:
            self._visit(node, depth, open_alternatives)
        finally:
            self.path.pop()
            del self.on_path[id(node)]

    def _visit(self, node: Mapping[str, Any], depth: int, open_alternatives: int) -> None:
        if self.counting:
            self._counts(node)
            if isinstance(node.get("pattern"), str):
                self.counts += check_pattern(node["pattern"], param=self.param, what=self.what)
            if "enum" in node:
                self._enum(node["enum"])
        self._properties(node)
        here = open_alternatives
        for key in (*_ALTERNATIVE_KEYS, "type"):
            options = node.get(key)
            if isinstance(options, list):
                here *= max(1, len(options))
        if here > MAX_ALTERNATIVES:
            raise self.refuse(
                f"offers {here} alternatives at one place (anyOf, oneOf and type lists, nested ones multiplied), "
                f"over the limit of {MAX_ALTERNATIVES}; use an enum or fewer alternatives."
            )
        ref = node.get("$ref")
        target = _ref_target(self.root, ref) if isinstance(ref, str) else None
        if target is not None:  # a reference is read where it is: its alternatives open here
            if id(target) in self.on_path:
                self._check_cycle(self.path[self.on_path[id(target)] :])
            elif (id(target), here) not in self.followed:
                self.followed.add((id(target), here))
                counting, self.counting = self.counting, False
                try:
                    self.visit(target, depth + 1, here)
                finally:
                    self.counting = counting
        for key in _ALTERNATIVE_KEYS:  # an alternative starts where its list does
            for child in _list(node.get(key)):
                self.visit(child, depth + 1, here)
        for key in _LIST_KEYS:
            for child in _list(node.get(key)):
                self.visit(child, depth + 1, here if key == "allOf" else 1)
        for key in _MAP_KEYS:
            sub = node.get(key)
            if isinstance(sub, Mapping):
                for name, child in sub.items():
                    if key == "patternProperties" and self.counting:
                        self.counts += check_pattern(str(name), param=self.param, what=self.what)
                    self.visit(child, depth + 1, 1)
        for key in _ONE_KEYS:
            sub = node.get(key)
            for child in sub if isinstance(sub, list) else (sub,):
                self.visit(child, depth + 1, 1)

    def _check_cycle(self, cycle: list[Mapping[str, Any]]) -> None:
        """Refuse a schema that refers to itself through two alternatives that start alike: each level of nesting
        keeps both open (the grammar cannot tell them apart yet), so what it tracks doubles with the depth."""
        on_cycle = {id(n) for n in cycle}
        for node in cycle:
            for key in _ALTERNATIVE_KEYS:
                options = node.get(key)
                if not isinstance(options, list) or len(options) < 2:
                    continue
                back = [o for o in options if _refers_to(self.root, o, on_cycle)]
                firsts = [_first_chars(self.root, o, self.first_memo) for o in back]
                if any(firsts[i] & firsts[j] for i in range(len(firsts)) for j in range(i)):
                    raise self.refuse(
                        f"refers to itself through {key} alternatives that can start alike, so what its grammar tracks "
                        "multiplies with each level of nesting; give the alternatives different types, or drop the "
                        "self-reference."
                    )

    def _counts(self, node: Mapping[str, Any]) -> None:
        for pair in COUNT_PAIRS:
            largest = 0
            for key in pair:
                if key not in node:
                    continue
                value = node[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise self.refuse(f"has {key} {value!r}; it must be a whole number from 0 to {MAX_COUNT}.")
                if value > MAX_COUNT:
                    raise self.refuse(
                        f"has {key} {value}, over the limit of {MAX_COUNT}; lower it (or leave it out and check "
                        "the answer's size yourself)."
                    )
                largest = max(largest, value)
            self.counts += largest

    def _enum(self, values: Any) -> None:
        if not isinstance(values, list) or not values:
            raise self.refuse("has an enum that is not a list of values; send a non-empty list.")
        self.enum_values += len(values)
        if self.enum_values > MAX_ENUM_VALUES:
            raise self.refuse(
                f"has {self.enum_values} enum values or more, over the limit of {MAX_ENUM_VALUES} for the whole "
                "schema; use fewer values or a pattern."
            )
        size = len(json.dumps(values, separators=(",", ":")))
        if size > MAX_ENUM_BYTES:
            raise self.refuse(
                f"has an enum of {size} bytes as JSON, over the limit of {MAX_ENUM_BYTES}; shorten its values or "
                "use fewer."
            )

    def _properties(self, node: Mapping[str, Any]) -> None:
        # allOf's parts (and the anyOf inside one) become one object whose properties are theirs together.
        parts = [node, *(_resolved(self.root, p) for p in _list(node.get("allOf")))]
        parts += [_resolved(self.root, q) for p in parts[1:] for q in _list(p.get("anyOf"))]
        count = sum(len(p[key]) for p in parts for key in ("properties", "patternProperties")
                    if isinstance(p.get(key), Mapping))  # fmt: skip
        if count > MAX_PROPERTIES:
            raise self.refuse(
                f"has an object of {count} properties, over the limit of {MAX_PROPERTIES}; nest some of them in "
                "objects of their own."
            )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _refers_to(root: Mapping[str, Any], node: Any, targets: set[int]) -> bool:
    """Whether ``node`` is one of ``targets`` (ids of sub-schemas) or holds a reference to one."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if isinstance(n, list):
            todo.extend(n)
            continue
        if not isinstance(n, Mapping) or id(n) in seen:
            continue
        seen.add(id(n))
        if id(n) in targets:
            return True
        ref = n.get("$ref")
        target = _ref_target(root, ref) if isinstance(ref, str) else None
        if target is not None:  # what it refers to, and what that refers to in turn
            todo.append(target)
        todo.extend(v for k, v in n.items() if k not in ("const", "enum", "default", "examples"))
    return False


def _ref_target(root: Mapping[str, Any], ref: str) -> Mapping[str, Any] | None:
    """The sub-schema of ``root`` a local ``$ref`` (``#`` or ``#/...``) points at, else None."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        target = target.get(part) if isinstance(target, Mapping) else None
    return target if isinstance(target, Mapping) else None


# The characters a JSON value of each type starts with (no whitespace: the grammars write none before a value).
_STARTS = {"object": "{", "array": "[", "string": '"', "number": "-0123456789", "integer": "-0123456789",
           "boolean": "tf", "null": "n"}  # fmt: skip
_ANY_START = frozenset("".join(_STARTS.values()))


def _first_chars(root: Mapping[str, Any], node: Any, memo: dict[int, frozenset[str] | None]) -> frozenset[str]:
    """The characters a value valid for ``node`` can start with (all of them where that is not known). ``memo``
    holds each sub-schema's answer (None while it is being worked out: a reference back to it could start with
    anything), so a schema of shared parts costs one look at each."""
    if not isinstance(node, Mapping):
        return frozenset() if node is False else _ANY_START
    key = id(node)
    if key in memo:
        known = memo[key]
        return _ANY_START if known is None else known
    memo[key] = None
    out = _first_chars_of(root, node, memo)
    memo[key] = out
    return out


def _first_chars_of(root: Mapping[str, Any], node: Mapping[str, Any], memo: dict[int, frozenset[str] | None]) -> frozenset[str]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = _ref_target(root, ref)
        return _ANY_START if target is None else _first_chars(root, target, memo)
    if "const" in node:
        return frozenset(json.dumps(node["const"])[:1])
    if isinstance(node.get("enum"), list):
        return frozenset(json.dumps(v)[:1] for v in node["enum"])
    kind = node.get("type")
    if isinstance(kind, str):
        return frozenset(_STARTS.get(kind, _ANY_START))
    if isinstance(kind, list):
        return frozenset("".join(_STARTS.get(k, "".join(_ANY_START)) for k in kind if isinstance(k, str)))
    alternatives = [*_list(node.get("anyOf")), *_list(node.get("oneOf"))]
    if alternatives:
        return frozenset().union(*(_first_chars(root, a, memo) for a in alternatives))
    parts = _list(node.get("allOf"))
    if parts:
        return frozenset.intersection(*(_first_chars(root, p, memo) for p in parts))
    if any(k in node for k in ("properties", "additionalProperties", "required", "patternProperties")):
        return frozenset("{")
    if any(k in node for k in ("items", "prefixItems", "minItems", "maxItems")):
        return frozenset("[")
    return _ANY_START


def _resolved(root: Mapping[str, Any], node: Any) -> Mapping[str, Any]:
    """``node``, or the sub-schema of ``root`` its local ``$ref`` points at (one step, as allOf is read)."""
    if not isinstance(node, Mapping):
        return {}
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node
    return _ref_target(root, ref) or {}


# Python's words for the mistakes JSON Schema's regular expressions (ECMA-262) refuse too; its other errors can be
# ECMA syntax Python lacks (\p{L}, (?<name>...)), which the grammar compilers read.
_SYNTAX_ERRORS = ("bad character range", "missing ), unterminated subpattern", "unbalanced parenthesis",
                  "nothing to repeat", "multiple repeat")  # fmt: skip


# A back-reference (\1 to \9, \k<name>, (?P=name)) after any even run of backslashes.
_BACK_REFERENCE = re.compile(r"(?<!\\)(?:\\\\)*\\(?:[1-9]|k<)|\(\?P=")


def pattern_syntax_error(pattern: str) -> str | None:
    """What makes ``pattern`` no regular expression in any dialect (a range from z to a, an unclosed group), or None."""
    try:
        with warnings.catch_warnings():  # "possible nested set" and the like: a client's pattern, not Hearth's code
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except re.error as exc:
        return exc.msg if exc.msg.startswith(_SYNTAX_ERRORS) else None
    except (RecursionError, OverflowError, ValueError):
        return None
    return None


def check_pattern(pattern: str, *, param: str, what: str = "The output's JSON schema") -> int:
    """Refuse a regex that is too long or whose nested repetition would make the grammar explode.

    Returns:
        The pattern's repetition product (its part of :data:`MAX_COUNTS_TOTAL`).

    Raises:
        SchemaTooComplex: over :data:`MAX_PATTERN_LENGTH`, :data:`MAX_REPETITION` or :data:`MAX_EMPTY_REPEATS`.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise SchemaTooComplex(
            f"{what} has a pattern of {len(pattern)} characters, over the limit of {MAX_PATTERN_LENGTH}; shorten it.",
            param,
        )
    broken = pattern_syntax_error(pattern)
    if broken is not None:
        raise InvalidRequest(f"{what} has the pattern {pattern!r}, which is no regular expression ({broken}); fix it.", param)
    if _BACK_REFERENCE.search(pattern):
        raise InvalidRequest(f"{what} has the pattern {pattern!r}, whose back-reference no grammar can hold (it is no "
                             "regular language); match the text without it.", param)  # fmt: skip
    shape = pattern_shape(pattern)
    if shape.repetition > MAX_REPETITION:
        raise SchemaTooComplex(
            f"{what} has the pattern {pattern!r}, whose nested repetition counts multiply to {shape.repetition}, "
            f"over the limit of {MAX_REPETITION}; avoid repeating a repeated group.",
            param,
        )
    if shape.empty_repeats > MAX_EMPTY_REPEATS:
        raise SchemaTooComplex(
            f"{what} has the pattern {pattern!r}, which repeats a group that can match nothing up to "
            f"{shape.empty_repeats} times, over the limit of {MAX_EMPTY_REPEATS}; make the group match at least one "
            "character (write a{0,50} rather than (a?){0,50}).",
            param,
        )
    return shape.repetition


__all__ = [
    "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "MAX_PATTERN_LENGTH", "MAX_REPETITION", "MAX_EMPTY_REPEATS", "MAX_COUNT",
    "MAX_COUNTS_TOTAL", "MAX_PROPERTIES", "MAX_ALTERNATIVES", "MAX_ENUM_VALUES", "MAX_ENUM_BYTES", "COUNT_KEYS",
    "check_schema", "check_pattern", "pattern_syntax_error",
]  # fmt: skip
