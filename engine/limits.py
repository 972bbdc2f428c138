"""The limits that keep one request from stalling the others (docs/api.md, "Limits").

Every dialect's request becomes the same engine types, so each limit is checked once, where those
types are built: stop lists in :class:`~engine.types.SamplingParams`, JSON schemas in
:class:`~engine.types.ResponseFormat` and :class:`~engine.tools.spec.ToolSpec`, embedding inputs
by the routes that take them. A request over a limit is refused with a sentence naming it.

Why a schema is measured this way: the llama.cpp backend turns a schema into a GBNF grammar, whose
matcher keeps one parse stack per way the output so far can be read. A regex with nested repetition
(``(a{0,50}){0,50}``) can be read in combinatorially many ways, and one step's mask then takes
minutes in a single C call that nothing can interrupt. The product of nested repetition bounds is
what grows those stacks (a group that can match nothing, repeated), so that is what is bounded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidRequest, SchemaTooComplex

# -- stop sequences ------------------------------------------------------------------------------
MAX_STOP_SEQUENCES = 16
MAX_STOP_LENGTH = 512

# -- embeddings ------------------------------------------------------------------------------------
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's own limit
MAX_RERANK_DOCUMENTS = 2048  # as many as embeddings' inputs: each is scored with the query

# -- JSON schemas (response formats, tool parameters) ----------------------------------------------
MAX_SCHEMA_BYTES = 65_536  # the schema as compact JSON
MAX_SCHEMA_DEPTH = 32  # nested objects, arrays and combinators
MAX_PATTERN_LENGTH = 512  # characters of one `pattern`
MAX_REPETITION = 1_000  # the product of nested repetition bounds in one pattern
# How often a group that can match nothing may repeat, nested repetitions around it multiplied: the one
# shape that multiplies GBNF's parse stacks (measured on the starter's vocabulary, one whole-vocabulary
# mask: (a{0,10}){0,10} 0.05 s, (a{0,2}){0,50} 2.8 s, (a?){0,100} 9.5 s, (a{0,50}){0,50} minutes;
# (a{1,50}){0,50}, (a+)+ and (a*)* under 0.02 s).
MAX_EMPTY_REPEATS = 10

_PATTERN_KEYS = ("pattern",)
_MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST_KEYS = ("anyOf", "oneOf", "allOf", "prefixItems")
_ONE_KEYS = ("items", "not", "if", "then", "else", "contains", "propertyNames", "additionalProperties",
             "unevaluatedProperties", "unevaluatedItems")  # fmt: skip


def check_stops(stops: Sequence[str]) -> None:
    """Refuse a stop list longer than :data:`MAX_STOP_SEQUENCES` or with a stop over :data:`MAX_STOP_LENGTH`.

    Raises:
        InvalidRequest: over either limit.
    """
    if len(stops) > MAX_STOP_SEQUENCES:
        raise InvalidRequest(
            f"At most {MAX_STOP_SEQUENCES} stop sequences are accepted, got {len(stops)}; send fewer.", param="stop"
        )
    longest = max((len(s) for s in stops), default=0)
    if longest > MAX_STOP_LENGTH:
        raise InvalidRequest(
            f"A stop sequence may be at most {MAX_STOP_LENGTH} characters, got one of {longest}; shorten it.",
            param="stop",
        )


def check_embedding_inputs(n: int, *, param: str = "input") -> None:
    """Refuse an embeddings request of more than :data:`MAX_EMBEDDING_INPUTS` texts.

    Raises:
        InvalidRequest: too many inputs.
    """
    if n > MAX_EMBEDDING_INPUTS:
        raise InvalidRequest(
            f"At most {MAX_EMBEDDING_INPUTS} inputs are embedded per request, got {n}; split them over several requests.",
            param=param,
        )


def check_rerank_documents(n: int) -> None:
    """Refuse a rerank request of more than :data:`MAX_RERANK_DOCUMENTS` documents.

    Raises:
        InvalidRequest: too many documents.
    """
    if n > MAX_RERANK_DOCUMENTS:
        raise InvalidRequest(
            f"At most {MAX_RERANK_DOCUMENTS} documents are reranked per request, got {n}; split them over several requests.",
            param="documents",
        )


def check_schema(schema: Any, *, param: str, what: str = "The output's JSON schema") -> None:
    """Refuse a JSON schema whose grammar could take unbounded time to match.

    Args:
        schema: The schema (a mapping; anything else is left to the grammar compiler to refuse).
        param: The request field it came in (the error's ``param``).
        what: The schema as the error's sentence names it.

    Raises:
        SchemaTooComplex: the schema is over :data:`MAX_SCHEMA_BYTES`, nests deeper than
            :data:`MAX_SCHEMA_DEPTH`, or holds a pattern longer than :data:`MAX_PATTERN_LENGTH` or with
            nested repetition over :data:`MAX_REPETITION`.
    """
    if not isinstance(schema, Mapping):
        return
    try:
        size = len(json.dumps(schema, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        raise SchemaTooComplex(f"{what} is not plain JSON; send a JSON object.", param) from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaTooComplex(
            f"{what} is {size} bytes, over the limit of {MAX_SCHEMA_BYTES}; simplify it.", param
        )
    _walk(schema, param, what, 0)


def _walk(node: Any, param: str, what: str, depth: int) -> None:
    if not isinstance(node, Mapping):
        return
    if depth > MAX_SCHEMA_DEPTH:
        raise SchemaTooComplex(
            f"{what} nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it.", param
        )
    for key in _PATTERN_KEYS:
        if isinstance(node.get(key), str):
            check_pattern(node[key], param=param, what=what)
    for key in _MAP_KEYS:
        sub = node.get(key)
        if isinstance(sub, Mapping):
            for name, child in sub.items():
                if key == "patternProperties":
                    check_pattern(str(name), param=param, what=what)
                _walk(child, param, what, depth + 1)
    for key in _LIST_KEYS:
        sub = node.get(key)
        if isinstance(sub, list):
            for child in sub:
                _walk(child, param, what, depth + 1)
    for key in _ONE_KEYS:
        sub = node.get(key)
        if isinstance(sub, list):
            for child in sub:
                _walk(child, param, what, depth + 1)
        else:
            _walk(sub, param, what, depth + 1)


def check_pattern(pattern: str, *, param: str, what: str = "The output's JSON schema") -> None:
    """Refuse a regex that is too long or whose nested repetition would make the grammar explode.

    Raises:
        SchemaTooComplex: over :data:`MAX_PATTERN_LENGTH`, :data:`MAX_REPETITION` or :data:`MAX_EMPTY_REPEATS`.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise SchemaTooComplex(
            f"{what} has a pattern of {len(pattern)} characters, over the limit of {MAX_PATTERN_LENGTH}; shorten it.",
            param,
        )
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


@dataclass(frozen=True, slots=True)
class PatternShape:
    """What makes a regex's grammar costly.

    Attributes:
        repetition: The largest product of bounded repetition counts along one nesting path
            (``(a{0,50}){0,50}``: 2,500; ``a{5}b{7}``: 7, siblings do not multiply; ``*``/``+`` count 1).
        empty_repeats: The largest product of the bounds of repetitions over a group that can match
            nothing, and of the repetitions around one (``(a?){0,20}``: 20; ``(x(a?){0,5}){0,4}``: 20).
    """

    repetition: int
    empty_repeats: int


class _Item:
    __slots__ = ("weight", "empty", "nullable")

    def __init__(self, weight: int = 1, empty: int = 1, nullable: bool = False) -> None:
        self.weight, self.empty, self.nullable = weight, empty, nullable


class _Group:
    """One parenthesised group (or the whole pattern) while it is read."""

    __slots__ = ("weight", "empty", "any_nullable", "alt_nullable", "last")

    def __init__(self) -> None:
        self.weight = 1
        self.empty = 1
        self.any_nullable = False  # an earlier alternative can match nothing
        self.alt_nullable = True  # the current alternative, so far, can match nothing
        self.last: _Item | None = None  # the item a quantifier would apply to

    def add(self, item: _Item) -> None:
        self.flush()
        self.last = item

    def flush(self) -> None:
        item, self.last = self.last, None
        if item is not None:
            self.weight = max(self.weight, item.weight)
            self.empty = max(self.empty, item.empty)
            self.alt_nullable = self.alt_nullable and item.nullable

    def branch(self) -> None:
        self.flush()
        self.any_nullable = self.any_nullable or self.alt_nullable
        self.alt_nullable = True

    def close(self) -> _Item:
        self.flush()
        return _Item(self.weight, self.empty, self.any_nullable or self.alt_nullable)


def pattern_shape(pattern: str) -> PatternShape:
    """Measure ``pattern`` (see :class:`PatternShape`). Unreadable syntax is measured as far as it goes:
    the grammar compiler refuses what it cannot read."""
    stack = [_Group()]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        top = stack[-1]
        if c == "\\":
            anchor = pattern[i + 1 : i + 2] in ("b", "B", "A", "z", "Z")
            top.add(_Item(nullable=anchor))
            i += 2
        elif c == "[":
            top.add(_Item())
            i = _class_end(pattern, i)
        elif c == "(":
            stack.append(_Group())
            i += 1
            if pattern.startswith("?", i):  # (?:...), (?=...), (?P<name>...): read the body as a group
                close = pattern.find(">", i) if pattern.startswith("?P<", i) or pattern.startswith("?<", i) else -1
                i = close + 1 if close != -1 and not pattern.startswith(("?<=", "?<!"), i) else i + 2
        elif c == ")":
            if len(stack) > 1:
                inner = stack.pop().close()
                stack[-1].add(inner)
            i += 1
        elif c == "|":
            top.branch()
            i += 1
        elif c in "^$":
            top.add(_Item(nullable=True))
            i += 1
        else:
            bounds, j = _quantifier(pattern, i)
            if bounds is None or top.last is None:
                top.add(_Item())
                i += 1
                continue
            low, high = bounds
            item = top.last
            if high is not None:
                grows = item.nullable or item.empty > 1
                item.empty = item.empty * high if grows and high > 1 else item.empty
                item.weight *= high
            item.nullable = item.nullable or low == 0
            i = j
    while len(stack) > 1:  # unclosed groups: measure what is there
        inner = stack.pop().close()
        stack[-1].add(inner)
    whole = stack[0].close()
    return PatternShape(repetition=whole.weight, empty_repeats=whole.empty)


def repetition_product(pattern: str) -> int:
    """The largest product of bounded repetition counts along one nesting path of ``pattern``."""
    return pattern_shape(pattern).repetition


def _class_end(pattern: str, i: int) -> int:
    """The index just past the character class that opens at ``i``."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def _quantifier(pattern: str, i: int) -> tuple[tuple[int, int | None] | None, int]:
    """The (low, high) bounds of the quantifier at ``i`` (high None: unbounded; None if there is none) and
    the index past it (and a lazy or possessive mark)."""
    c = pattern[i]
    bounds: tuple[int, int | None]
    if c == "*":
        bounds, j = (0, None), i + 1
    elif c == "+":
        bounds, j = (1, None), i + 1
    elif c == "?":
        bounds, j = (0, 1), i + 1
    elif c == "{":
        close = pattern.find("}", i)
        if close == -1:
            return None, i
        low, sep, high = (part.strip() for part in pattern[i + 1 : close].partition(","))
        if not low.isdigit() or (sep and high and not high.isdigit()):
            return None, i  # a literal brace
        if not sep:
            bounds = (int(low), int(low))
        else:
            bounds = (int(low), int(high) if high else None)
        j = close + 1
    else:
        return None, i
    if j < len(pattern) and pattern[j] in "?+":
        j += 1
    return bounds, j


__all__ = [
    "MAX_STOP_SEQUENCES",
    "MAX_STOP_LENGTH",
    "MAX_EMBEDDING_INPUTS",
    "MAX_RERANK_DOCUMENTS",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "MAX_PATTERN_LENGTH",
    "MAX_REPETITION",
    "MAX_EMPTY_REPEATS",
    "PatternShape",
    "pattern_shape",
    "check_stops",
    "check_embedding_inputs",
    "check_rerank_documents",
    "check_schema",
    "check_pattern",
    "repetition_product",
]
