"""The shape of a regex that makes its grammar costly: nested repetition counts, and repeats of a group
that can match nothing (engine.schema_limits bounds both for every ``pattern`` of a JSON schema).

Read with a small scanner rather than Python's ``re`` parser: a schema's pattern is ECMA-262 syntax, and
what is measured must be measured even where Python would refuse the syntax.
"""

from __future__ import annotations

from dataclasses import dataclass


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


__all__ = ["PatternShape", "pattern_shape", "repetition_product"]
