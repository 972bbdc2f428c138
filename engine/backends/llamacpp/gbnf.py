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
import re
from collections.abc import Mapping
from typing import Any

_END = ""  # the key of a trie node that marks the end of a value (children are keyed by one character)


def schema_to_gbnf(schema: Mapping[str, Any]) -> str:
    """The GBNF of ``schema`` (rule ``root``).

    Raises:
        Exception: the converter's own (bare exceptions, assertion errors) for what it cannot read.
    """
    from llama_cpp.llama_grammar import RESERVED_NAMES, BuiltinRule, SchemaConverter

    class TrieEnums(SchemaConverter):
        def _add_primitive(self, name, rule):  # noqa: ANN001, ANN202 - the base class's signature
            if name == "char":  # the base lets a raw line break or other control character into a string: no JSON
                rule = BuiltinRule(_JSON_CHAR, [])
            return super()._add_primitive(name, rule)

        def _add_rule(self, name, rule):  # noqa: ANN001, ANN202 - the base class's signature
            if name == "dot":  # a pattern's ".": any character a JSON string holds as it is
                rule = _JSON_CHAR.split(" | ", 1)[0]
            return super()._add_rule(name, rule)

        def _format_literal(self, literal):  # noqa: ANN001, ANN202 - the base class's signature
            # The base escapes quotes but not backslashes, so a constant or property name written by
            # json.dumps ("\u0000") came out as a GBNF escape (a NUL no token can write: llama.cpp then
            # aborted the process) or as a literal that ends too early.
            return gbnf_literal(literal)

        def _visit_pattern(self, pattern, name):  # noqa: ANN001, ANN202 - the base class's signature
            return super()._visit_pattern(gbnf_pattern(pattern), name)

        def visit(self, schema, name):  # noqa: ANN001 - the base class's signature
            bounded = _bounded_number(schema)
            if bounded is not None:
                rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
                return self._add_rule(rule_name, f"({bounded}) space")
            if _plain_enum(schema):
                rule_name = name + "-" if name in RESERVED_NAMES else name or "root"  # as the converter names it
                body = enum_rule(schema["enum"], lambda suffix, rule: self._add_rule(f"{rule_name}-{suffix}", rule))
                return self._add_rule(rule_name, body)
            return super().visit(schema, name)

    converter = TrieEnums(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    resolved = converter.resolve_refs(json.loads(json.dumps(converter_ready(schema))), "stdin")
    converter.visit(resolved, "")
    return converter.format_grammar()


# -- what the converter reads otherwise than JSON Schema -------------------------------------------------------
#
# Valid schemas that llama-cpp-python's converter refuses or misreads, each written as an equal schema it reads:
# - a boolean schema (``"items": true``, a property ``false``): it expects an object everywhere;
# - a schema without validation keywords (``{}``, ``{"description": ...}``: any value): it refuses the second and
#   reads the first as an object (``items: {}``, as pydantic writes ``list[Any]``, failed on ``prefixItems``);
# - ``allOf`` with one member beside annotations (pydantic v1's ``{"allOf": [{"$ref": ...}], "description": ...}``):
#   it merges only members' properties, so an enum or string member came out as ``{}``;
# - a reference at the root (``{"$ref": "#/$defs/P", "$defs": ...}``) or to the whole schema (``"#"``, a recursive
#   model): it resolves neither. The schema's definitions move to ``$defs`` (engine.tools.constraint.hoisted) and
#   the root takes the referenced definition's place.

_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "readOnly", "writeOnly",
    "deprecated", "contentMediaType", "contentEncoding", "nullable",
})  # fmt: skip
#: A schema the converter reads as any JSON value (its own rule for one).
ANY_VALUE: dict[str, Any] = {"type": "value"}


def converter_ready(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` as the converter reads it right (see above); the same values valid."""
    from engine.tools.constraint import has_ref, hoisted

    out = _ready(schema, root=True)
    if not isinstance(out, dict):  # the root `false`: nothing is valid; the closest the converter holds
        return {"type": "object", "properties": {}, "additionalProperties": False}
    if has_ref(out) and (_refers_to_root(out) or "$ref" in out):
        defs: dict[str, Any] = {}
        body = hoisted(out, "schema", defs)
        seen: set[str] = set()  # definitions that only refer on, perhaps in a circle (no schema: refused later)
        while set(body) == {"$ref"} and body["$ref"].startswith("#/$defs/") and body["$ref"][8:] in defs:
            if body["$ref"] in seen:
                raise ValueError(f"the references from {body['$ref']} lead only to each other")
            seen.add(body["$ref"])
            body = defs[body["$ref"][8:]]
        out = {**body, "$defs": defs}
    return out


def _refers_to_root(node: Any) -> bool:
    if isinstance(node, Mapping):
        return node.get("$ref") == "#" or any(_refers_to_root(v) for k, v in node.items() if k not in ("const", "enum"))
    if isinstance(node, list):
        return any(_refers_to_root(v) for v in node)
    return False


def _ready(node: Any, *, root: bool = False) -> Any:
    """One (sub)schema made ready; None for ``false`` (no value is valid)."""
    if node is True:
        return dict(ANY_VALUE)
    if node is False:
        return None
    if not isinstance(node, Mapping):
        return node
    out = dict(node)
    if isinstance(out.get("properties"), Mapping):
        props, required = {}, list(out.get("required") or [])
        for name, sub in out["properties"].items():
            ready = _ready(sub)
            if ready is None:  # the property must not be there
                required = [r for r in required if r != name]
                continue
            props[name] = ready
        out["properties"] = props
        if "required" in out:
            out["required"] = required
    if "items" in out:
        if out["items"] is False:  # no item is valid: an empty array
            out["items"], out["maxItems"] = dict(ANY_VALUE), 0
        elif isinstance(out["items"], list):
            out["items"] = [_ready(s) or dict(ANY_VALUE) for s in out["items"]]
        else:
            out["items"] = _ready(out["items"])
    if isinstance(out.get("prefixItems"), list):
        out["prefixItems"] = [_ready(s) or dict(ANY_VALUE) for s in out["prefixItems"]]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), list):
            kept = [r for r in (_ready(s) for s in out[key]) if r is not None]
            out[key] = kept or out[key]
    if isinstance(out.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _ready(out["additionalProperties"])
    for key in ("$defs", "definitions"):
        if isinstance(out.get(key), Mapping):
            out[key] = {name: _ready(sub) or dict(ANY_VALUE) for name, sub in out[key].items()}
    rest = {k: v for k, v in out.items() if k not in _ANNOTATIONS}
    if isinstance(out.get("allOf"), list) and len(out["allOf"]) == 1 and set(rest) == {"allOf"}:
        member = out["allOf"][0]
        if isinstance(member, Mapping):
            return {**{k: v for k, v in out.items() if k != "allOf"}, **member}
    if not rest and not root:  # no validation keyword: any value
        return {**out, **ANY_VALUE}
    return out


# A character of a JSON string: anything but a quote, a backslash or a control character, or an escape.
_JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'


# -- numbers between bounds ----------------------------------------------------------------------------------
#
# The converter writes "integer" and "number" alike whatever their minimum and maximum. Here a bounded one is a
# rule that matches exactly the decimal texts between its bounds: an integer part of up to MAX_DIGITS digits
# (as the converter's), a fraction of up to MAX_DIGITS digits, no exponent (any value between bounds can be
# written without one). Digit strings between two of the same length are written the usual way: the shared
# first digits, then a digit above the low one's with anything after it, and so on.

MAX_DIGITS = 16
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _bounded_number(schema: Any) -> str | None:
    """The GBNF (without the trailing space) of a bounded integer or number schema, else None.

    Raises:
        ValueError: no value lies between the bounds.
    """
    if not isinstance(schema, Mapping) or schema.get("type") not in ("integer", "number"):
        return None
    if not any(isinstance(schema.get(k), (int, float)) and not isinstance(schema.get(k), bool) for k in _BOUNDS):
        return None
    if any(k in schema for k in ("enum", "const", "$ref", "anyOf", "oneOf", "allOf")):
        return None
    from decimal import Decimal

    def bound(key: str, exclusive_key: str) -> tuple[Decimal | None, bool]:
        value, exclusive = schema.get(key), schema.get(exclusive_key)
        if isinstance(exclusive, (int, float)) and not isinstance(exclusive, bool):
            other = Decimal(str(exclusive))
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return other, True
            mine = Decimal(str(value))  # both: the tighter wins (the exclusive one on a tie)
            if key == "minimum":
                return (other, True) if other >= mine else (mine, False)
            return (other, True) if other <= mine else (mine, False)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return Decimal(str(value)), exclusive is True  # draft 4: a boolean beside the bound
        return None, False

    lo, lo_ex = bound("minimum", "exclusiveMinimum")
    hi, hi_ex = bound("maximum", "exclusiveMaximum")
    limit = Decimal(10) ** MAX_DIGITS - 1
    if schema["type"] == "integer":
        import math

        a = None if lo is None else (math.floor(lo) + 1 if lo_ex else math.ceil(lo))
        b = None if hi is None else (math.ceil(hi) - 1 if hi_ex else math.floor(hi))
        a = None if a is not None and a < -limit else a
        b = None if b is not None and b > limit else b
        if (a is not None and b is not None and a > b) or (a is not None and a > limit) or (b is not None and b < -limit):
            raise ValueError(f"no integer of at most {MAX_DIGITS} digits lies between the bounds of {json.dumps(dict(schema))}")
        return _integers(a, b)
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_ex or hi_ex))):
        raise ValueError(f"no number lies between the bounds of {json.dumps(dict(schema))}")
    out = _numbers(lo, lo_ex, hi, hi_ex) if (lo is None or lo < limit) and (hi is None or hi > -limit) else ""
    if not any(c.isdigit() for c in out):  # beyond what MAX_DIGITS digits (whole or fraction) can write
        raise ValueError(f"no number of at most {MAX_DIGITS} digits lies between the bounds of {json.dumps(dict(schema))}")
    return out


def _group(expr: str) -> str:
    return f"({expr})" if " | " in expr else expr


def _seq(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _digits(lo: int, hi: int) -> str:
    return f'"{lo}"' if lo == hi else f"[{lo}-{hi}]"


def _any(n_min: int, n_max: int) -> str:
    """``n_min`` to ``n_max`` digits."""
    if n_max <= 0:
        return ""
    return "[0-9]" if n_min == n_max == 1 else f"[0-9]{{{n_min},{n_max}}}" if n_min != n_max else f"[0-9]{{{n_min}}}"


def _between(x: str, y: str) -> str:
    """Digit strings of ``len(x)`` from ``x`` to ``y`` (same length, ``x <= y``): a rule as long as the digits (each
    level splits off at most one end that is not every digit string)."""
    if not x:
        return ""
    if x == y:
        return gbnf_literal(x)
    if set(x) == {"0"} and set(y) == {"9"}:
        return _any(len(x), len(x))
    if x[0] == y[0]:
        return _seq(gbnf_literal(x[0]), _group(_between(x[1:], y[1:])))
    n = len(x) - 1
    alts = [_seq(gbnf_literal(x[0]), _group(_between(x[1:], "9" * n)))]
    if int(x[0]) + 1 <= int(y[0]) - 1:
        alts.append(_seq(_digits(int(x[0]) + 1, int(y[0]) - 1), _any(n, n)))
    alts.append(_seq(gbnf_literal(y[0]), _group(_between("0" * n, y[1:]))))
    return " | ".join(alts)


def _naturals(a: int, b: int | None) -> str:
    """The texts of the whole numbers from ``a >= 0`` to ``b`` (None: as long as MAX_DIGITS digits allow)."""
    first, last = len(str(a)), len(str(b)) if b is not None else MAX_DIGITS
    if first > last:
        return ""
    if first == last:
        return _between(str(a), str(b) if b is not None else "9" * last)
    alts = [_between(str(a), "9" * first)]
    if last - first >= 2 or b is None:  # every length between: no leading zero, any digits after
        top = last if b is None else last - 1
        alts.append(_seq("[1-9]", _any(first, top - 1)))
    if b is not None:
        alts.append(_between("1" + "0" * (last - 1), str(b)))
    return " | ".join(_group(x) for x in alts if x)


def _integers(a: int | None, b: int | None) -> str:
    alts = []
    if a is None or a < 0:  # the negatives, by their size
        alts.append(_seq('"-"', _group(_naturals(max(1, -b) if b is not None and b < 0 else 1, None if a is None else -a))))
    if b is None or b >= 0:
        alts.append(_naturals(max(0, a or 0), b))
    return " | ".join(_group(x) for x in alts)


# Fractions: the digits after the point, read as 0.<digits>, against a bound's own digits (without trailing zeros).
# A bound is FREE once the digits so far settle it, DEAD where none can meet it, else (its digits left, strict).
FREE: tuple[str, bool] = ("free", False)
_ANY_FRACTION = _any(1, MAX_DIGITS)


def _fraction(lower: tuple[str, bool], upper: tuple[str, bool] | None) -> tuple[str, bool]:
    """(the non-empty fraction digits with 0.lower <= 0.D <= 0.upper, each end strict where its flag says; whether
    no fraction at all, 0, is one). ``upper`` None: no upper bound."""
    if lower == ("", False):
        lower = FREE
    empty = lower == FREE and (upper is None or upper != ("", True))
    return _digits_after(lower, upper, 0), empty


def _digits_after(lower: tuple[str, bool], upper: tuple[str, bool] | None, depth: int) -> str:
    if depth >= MAX_DIGITS or upper == ("", True):  # no digits left, or below 0 strictly: none
        return ""
    if lower == FREE and (upper is None or upper == FREE):
        return _any(1, MAX_DIGITS - depth)
    if lower == FREE and upper == ("", False):  # at most 0.000...: zeros
        return '"0"{1,' + str(MAX_DIGITS - depth) + "}"
    # an empty strict lower bound: above 0.000..., a digit at a time; an empty upper one: 0.000... (zeros)
    low = 0 if lower == FREE else int(lower[0][0]) if lower[0] else 0
    high = 9 if upper is None or upper == FREE else int(upper[0][0]) if upper[0] else 0
    groups: dict[tuple, list[int]] = {}
    for d in range(low, high + 1):
        nl = FREE if lower == FREE or d > low else ((lower[0][1:], lower[1]) if lower[0] else ("", True))
        if nl == ("", False):
            nl = FREE
        nu = None if upper is None else FREE if upper == FREE or d < high else (upper[0][1:], upper[1])
        groups.setdefault((nl, nu), []).append(d)
    alts = []
    for (nl, nu), digits in groups.items():
        head = _digits(digits[0], digits[-1])
        tail = _digits_after(nl, nu, depth + 1)
        stop = nl == FREE and nu != ("", True)  # the digits may end here
        if tail:
            alts.append(_seq(head, f"({tail})?" if stop else _group(tail)))
        elif stop:
            alts.append(head)
    return " | ".join(alts)


def _with_fraction(whole: str, fraction: tuple[str, bool]) -> str:
    digits, bare = fraction
    if not whole:
        return ""
    if not digits:
        return whole if bare else ""
    return _seq(whole, f'("." {_group(digits)})' + ("?" if bare else ""))


def _magnitudes(lo, lo_ex: bool, hi, hi_ex: bool) -> str:  # noqa: ANN001 - Decimals or None
    """The texts of the numbers from ``lo >= 0`` to ``hi`` (None: unbounded), each end excluded where said."""
    import math

    def parts(x) -> tuple[int, str]:  # noqa: ANN001
        whole = math.floor(x)
        return whole, format(x - whole, "f")[2:].rstrip("0") if x != whole else ""

    a, fa = parts(lo)
    low = (fa, lo_ex) if (fa or lo_ex) else FREE
    if hi is not None and math.floor(hi) >= 10**MAX_DIGITS:
        hi = None
    alts = []
    if hi is not None and math.floor(hi) == a:
        alts.append(_with_fraction(gbnf_literal(str(a)), _fraction(low, (parts(hi)[1], hi_ex))))
    else:
        alts.append(_with_fraction(gbnf_literal(str(a)), _fraction(low, None)))
        top = None if hi is None else math.floor(hi) - 1
        if top is None or top >= a + 1:
            alts.append(_with_fraction(_group(_naturals(a + 1, top)), (_ANY_FRACTION, True)))
        if hi is not None:
            b, fb = parts(hi)
            alts.append(_with_fraction(gbnf_literal(str(b)), _fraction(FREE, (fb, hi_ex))))
    return " | ".join(_group(x) for x in alts if x)


def _numbers(lo, lo_ex: bool, hi, hi_ex: bool) -> str:  # noqa: ANN001 - Decimals or None
    from decimal import Decimal

    zero = Decimal(0)
    alts = []
    if lo is None or lo < 0:  # negatives by their size: from -hi (or 0) to -lo
        small, small_ex = (-hi, hi_ex) if hi is not None and hi <= 0 else (zero, False)
        alts.append(_seq('"-"', _group(_magnitudes(small, small_ex, None if lo is None else -lo, lo_ex))))
    if hi is None or hi >= 0:
        start, start_ex = (lo, lo_ex) if lo is not None and lo >= 0 else (zero, False)
        if not (hi is not None and hi == 0 and hi_ex):
            alts.append(_magnitudes(start, start_ex, hi, hi_ex))
    return " | ".join(_group(x) for x in alts if x)


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
# A negation leaves out what would end the string or break it (a quote, a backslash, control characters) as well.
_CLASSES = {"d": "0-9", "w": "a-zA-Z0-9_"}
# \s as JSON Schema's (ECMA-262) regular expressions read it: tab, line feed, vertical tab, form feed, carriage
# return (each its JSON escape in the string), the space and Unicode's spaces.
_WHITESPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
               (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))  # fmt: skip
_NOT_IN_A_STRING = '"\\\\\\x01-\\x1F'
_CONTROL_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_JSON_SHORT = {0x22: '"', 0x5C: "\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_JSON_SHORT_QUOTED = ('"', "\\")  # written as GBNF's escapes of them, which the converter copies as they are


def _in_json(code: int) -> bool:
    """Whether a JSON string holds the character as it is (not a quote, a backslash or a control character)."""
    return code >= 0x20 and code not in (0x22, 0x5C)


def _json_escaped(code: int) -> str:
    """The pattern matching the JSON escape that writes the character (``\\"``, ``\\n``, ``\\u001f``): a backslash
    (GBNF's ``\\\\``) and the escape's characters, each as the converter reads it."""
    short = _JSON_SHORT.get(code)
    tail = f"u{code:04x}" if short is None else short
    return "\\\\" + ("\\" + tail if tail in _JSON_SHORT_QUOTED else tail)


_ESCAPED_IN_JSON = (*range(0x20), 0x22, 0x5C)
_QUANTIFIER = re.compile(r"\{(?:\d+(?:,\d*)?|,\d*)\}")


def _span(low: int, high: int) -> str:
    return _char(low) if low == high else f"{_char(low)}-{_char(high)}"


def _char(code: int) -> str:
    """The character as a pattern's class member the converter and GBNF read alike."""
    if code < 0x80 and chr(code).isalnum():
        return chr(code)
    return f"\\x{code:02X}" if code <= 0xFF else f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def _escaped_code(pattern: str, i: int) -> tuple[int | None, int]:
    """The character the escape at ``pattern[i]`` (a backslash) stands for, and where the pattern goes on; None for
    an escape that is no one character (``\\d``, ``\\b`` outside a class, ``\\p{L}``)."""
    e = pattern[i + 1]
    if e in _CONTROL_ESCAPES and (e != "0" or not pattern[i + 2 : i + 3].isdigit()):
        return _CONTROL_ESCAPES[e], i + 2
    if e in _HEX_DIGITS:
        digits = pattern[i + 2 : i + 2 + _HEX_DIGITS[e]]
        if len(digits) == _HEX_DIGITS[e] and all(c in "0123456789abcdefABCDEF" for c in digits):
            return int(digits, 16), i + 2 + len(digits)
        return None, i + 2
    if not e.isalnum():
        return ord(e), i + 2
    return None, i + 2


def _class(pattern: str, start: int) -> tuple[str, int] | None:
    """The class at ``pattern[start]`` (``[``) as it matches in a JSON string, and where the pattern goes on; None
    when it does not close. A negated class leaves out what would end the string or break it; a class holding a
    quote, a backslash or a control character is a group with each one's JSON escape beside the rest."""
    i = start + 1
    negated = pattern[i : i + 1] == "^"
    i += negated
    members: list[str] = []
    escaped: set[int] = set()
    others: list[str] = []  # \D, \W, \S: classes of their own
    codes: list[tuple[int, int]] = []
    first = True
    while i < len(pattern) and (pattern[i] != "]" or first):
        first = False
        if pattern[i] == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e in _CLASSES:
                members.append(_CLASSES[e])
                i += 2
                continue
            if e == "s":
                codes.extend(_WHITESPACE)
                i += 2
                continue
            if e in "DWS" and not negated:  # ([\s\S]: any character) an option of its own, its escapes beside it
                others.append(_negated_escape(e))
                escaped.update(c for c in _ESCAPED_IN_JSON if not (e == "S" and 0x09 <= c <= 0x0D))
                i += 2
                continue
            code, after = _escaped_code(pattern, i)
            if code is None:
                members.append(pattern[i:after])  # left for the converter or llama.cpp to read or refuse
                i = after
                continue
        else:
            code, after = ord(pattern[i]), i + 1
        i = after
        if pattern[i : i + 1] == "-" and i + 1 < len(pattern) and pattern[i + 1] != "]":
            if pattern[i + 1] == "\\" and i + 2 < len(pattern):
                high, after = _escaped_code(pattern, i + 1)
            else:
                high, after = ord(pattern[i + 1]), i + 2
            if high is not None:
                codes.append((code, high))
                i = after
                continue
        codes.append((code, code))
    if i >= len(pattern):
        return None
    if negated:  # what JSON escapes is left out with the rest of what would end or break the string
        return f"[^{''.join(members)}{''.join(_span(low, high) for low, high in codes)}{_NOT_IN_A_STRING}]", i + 1
    for low, high in codes:
        run = low
        for code in _ESCAPED_IN_JSON:  # the range less what JSON escapes, each of those an option of its own
            if low <= code <= high:
                if run < code:
                    members.append(_span(run, code - 1))
                run = code + 1
                escaped.add(code)
        if run <= high or low > high:  # a range from z to a: the converter's to refuse
            members.append(_span(run, high))
    if not escaped and not others:
        return f"[{''.join(members)}]", i + 1
    options = ([f"[{''.join(members)}]"] if members else []) + others + [_json_escaped(c) for c in sorted(escaped)]
    return "(" + "|".join(options) + ")", i + 1


def _negated_escape(e: str) -> str:
    """``\\D``, ``\\W`` or ``\\S`` as a class of what a JSON string holds as it is."""
    if e == "S":
        return f"[^{''.join(_span(low, high) for low, high in _WHITESPACE)}{_NOT_IN_A_STRING}]"
    return f"[^{_CLASSES[e.lower()]}{_NOT_IN_A_STRING}]"


def gbnf_pattern(pattern: str) -> str:
    """``pattern`` as it matches the text of a JSON string, with the escapes GBNF cannot read rewritten as ones it
    can: ``\\d``, ``\\w`` and ``\\s`` (and their negations outside a class) as classes, an escaped punctuation
    character as its ``\\xHH``; a quote, a backslash or a control character it matches (``\\n``, ``\\t``, a class
    holding one) as its JSON escape. Other escapes (``\\b``, back-references) are left for the converter or
    llama.cpp to refuse."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[":
            found = _class(pattern, i)
            if found is not None:
                out.append(found[0])
                i = found[1]
                continue
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            code, after = _escaped_code(pattern, i)
            if code is not None and not _in_json(code):
                out.append(_json_escaped(code))
            elif e in _GBNF_ESCAPES or e in _CONVERTER_ESCAPES:
                out.append(pattern[i:after])
            elif e in _CLASSES:
                out.append(f"[{_CLASSES[e]}]")
            elif e in "DWS":
                out.append(_negated_escape(e))
            elif e == "s":
                out.append(_class("[\\s]", 0)[0])  # type: ignore[index] - it closes
            elif code is not None and not e.isalnum():  # a class of one: the converter copies it whole
                out.append(f"[{_char(code)}]")
            else:
                out.append(pattern[i:after])
            i = after
            continue
        if c == "{" and (quantifier := _QUANTIFIER.match(pattern, i)):
            out.append(quantifier.group())
            i = quantifier.end()
            continue
        if not _in_json(ord(c)):
            out.append(_json_escaped(ord(c)))
        elif c in "]{}":  # a literal bracket (the converter looped on one, never advancing)
            out.append(f"[{_char(ord(c))}]")
        else:
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
