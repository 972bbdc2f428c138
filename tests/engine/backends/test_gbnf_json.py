"""The llama.cpp grammars of JSON schemas hold what the schema says, checked with llama.cpp's own grammar engine
token by token: numbers between their bounds, strings with no raw control characters, references that resolve
inside a tool call."""

from __future__ import annotations

import ctypes
import json
import random
import re
from decimal import Decimal

import jsonschema
import pytest

llama_cpp = pytest.importorskip("llama_cpp")

from engine.backends.llamacpp.gbnf import schema_to_gbnf  # noqa: E402
from engine.backends.llamacpp.model import GGUFModel  # noqa: E402


@pytest.fixture(scope="module")
def model(starter_path):
    return GGUFModel(starter_path)


def accepts(model: GGUFModel, grammar: str, text: str) -> bool:
    """Whether llama.cpp's grammar engine takes ``text`` whole (a token per character) and may end there."""
    g = llama_cpp.llama_sampler_init_grammar(model.vocab, grammar.encode(), b"root")
    assert g, grammar

    def allowed(token: int) -> bool:
        cell = (llama_cpp.llama_token_data * 1)()
        cell[0].id, cell[0].logit, cell[0].p = token, 0.0, 0.0
        llama_cpp.llama_sampler_apply(g, ctypes.byref(llama_cpp.llama_token_data_array(cell, 1, -1, False)))
        return cell[0].logit != float("-inf")

    try:
        for ch in text:
            [token] = model.tokenize(ch, parse_special=False)
            if not allowed(token):
                return False
            llama_cpp.llama_sampler_accept(g, token)
        return allowed(model.eos_id)
    finally:
        llama_cpp.llama_sampler_free(g)


NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")


def within(schema: dict, text: str) -> bool:
    """Whether ``text`` (a canonical JSON number: no -0, an integer without a fraction) is valid for ``schema``."""
    if not NUMBER.fullmatch(text) or text.startswith("-0"):
        return False
    if schema["type"] == "integer" and "." in text:
        return False
    try:
        jsonschema.validate(json.loads(text), schema)
    except jsonschema.ValidationError:
        return False
    return True


def _numbers(rng: random.Random, around: list[Decimal]) -> list[str]:
    out = []
    for base in around:
        for step in (Decimal("0"), Decimal("0.001"), Decimal("0.1"), Decimal("0.5"), Decimal("1"), Decimal("7")):
            for v in (base + step, base - step):
                out += [format(v.normalize(), "f"), format(v.quantize(Decimal("0.01")), "f")]
    out += [str(rng.randint(-200, 200)) for _ in range(10)] + [f"{rng.uniform(-50, 50):.3f}" for _ in range(10)]
    return [t for t in dict.fromkeys(out) if not t.startswith("-0")]


BOUNDED = [
    {"type": "integer", "minimum": 3, "maximum": 5},
    {"type": "integer", "minimum": -12, "maximum": 130},
    {"type": "integer", "exclusiveMinimum": 0},
    {"type": "integer", "maximum": -7},
    {"type": "integer", "minimum": 2.5, "exclusiveMaximum": 9.5},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "exclusiveMinimum": 0},
    {"type": "number", "minimum": -2.5, "maximum": 3.25},
    {"type": "number", "exclusiveMinimum": 1.5, "exclusiveMaximum": 2},
    {"type": "number", "minimum": -90, "maximum": 90},
    {"type": "number", "minimum": 0.05, "maximum": 0.25},
    {"type": "number", "exclusiveMaximum": 0},
    {"type": "number", "minimum": -1, "exclusiveMinimum": -1.5, "maximum": 10, "exclusiveMaximum": 10},
]


@pytest.mark.parametrize("schema", BOUNDED, ids=lambda s: json.dumps(s))
def test_a_bounded_number_takes_exactly_the_values_between_its_bounds(model, schema):
    grammar = schema_to_gbnf(schema)
    bounds = [Decimal(str(v)) for k, v in schema.items() if k != "type"]
    rng = random.Random(json.dumps(schema))
    wrong = [t for t in _numbers(rng, bounds) if accepts(model, grammar, t) != within(schema, t)]
    assert not wrong, grammar


def test_bounds_no_value_meets_are_refused():
    for schema in ({"type": "integer", "minimum": 3, "maximum": 2.5}, {"type": "number", "exclusiveMinimum": 1, "maximum": 1},
                   {"type": "integer", "minimum": 1e300}, {"type": "integer", "maximum": -1e20}, {"type": "number", "minimum": 1e20},
                   {"type": "number", "minimum": 1e-20, "maximum": 1e-19}):  # fmt: skip
        with pytest.raises(ValueError, match="lies between"):
            schema_to_gbnf(schema)


@pytest.mark.parametrize("schema", [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 100},
                                    {"type": "number", "exclusiveMinimum": 0}, {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                                    {"type": "number", "minimum": -1e15, "maximum": 1e15}])  # fmt: skip
def test_a_bounded_numbers_grammar_grows_with_its_digits_not_their_values(schema):
    assert len(schema_to_gbnf(schema)) < 2000


def test_a_string_holds_no_raw_line_break_or_control_character(model):
    for schema in ({"type": "string"}, {"type": "string", "maxLength": 10}, {"type": "string", "pattern": "^a.c$"}):
        grammar = schema_to_gbnf(schema)
        assert accepts(model, grammar, '"abc"')
        assert not accepts(model, grammar, '"a\nc"') and not accepts(model, grammar, '"a\tc"')
        if "pattern" not in schema:  # an escaped line break is JSON (a pattern's "." is one written character)
            assert accepts(model, grammar, '"a\\nc"')



# A pattern matches a string's text, which JSON writes with escapes: a quote, a backslash, a line break or a tab the
# pattern asks for (a custom tool's multi-line input) is its escape in the JSON, never a raw character that ends or
# breaks the string. A negated class leaves all of those out (it is held to less than the pattern allows). A bare
# "]" or "}" is a literal, which llama-cpp-python's converter looped on forever.
TEXT_PATTERNS = [r'^say "[a-z]{1,3}" \\ [a-z]$', r"^[a-z]+\n\t[a-z]+$", r"^[ -~]{1,4}$", r'^[ \t"]{2}$', r"^\x41\x22\u0042$",
                 "^a\nb$", r"^[\x00-\x1f]$", r"^[^\n]{1,3}$", r'^[^"a]$', r"^a]}$", r"^a\sb$", r"^\S+$", r"^[\s,]{2}$",
                 r"^[^\s]+$", r"^[\s\S]{1,3}$", r"^[\d\D]$"]  # fmt: skip
TEXTS = ['say "hi" \\ x', 'say "hi" / x', "ab\n\tcd", "ab\ncd", 'a"\\b', "ab", "a\nb", '\t"', "  ", 'A"B', "\x01", "\x1f", " ",
         '"', "\\", "~", "b", "a", "a]}", "a b", "a\tb", "a\rb", "a\x0bb", "a\x0cb", "a-b", " ,", "\n,", ",\r"]  # fmt: skip


@pytest.mark.parametrize("pattern", TEXT_PATTERNS)
def test_a_pattern_holds_the_text_of_the_string_its_escapes_included(model, pattern):
    grammar = schema_to_gbnf({"type": "string", "pattern": pattern})
    negated = "[^" in pattern or pattern == r"^\S+$"  # held to less than the pattern allows
    for text in TEXTS:
        written = json.dumps(text)
        taken, matches = accepts(model, grammar, written), bool(re.fullmatch(pattern, text))
        assert taken <= matches, (text, grammar)  # what the grammar takes, the pattern matches
        if not negated:
            assert taken == matches, (text, grammar)
    if negated:
        assert accepts(model, grammar, json.dumps("b")) and not accepts(model, grammar, json.dumps("\n"))

def test_a_tool_whose_parameters_refer_to_their_own_definitions_is_enforced(llama_backend):
    from engine.tools import parse_tool_choice, parse_tools
    from engine.types import ChatMessage, GenerationRequest, SamplingParams

    # what a nested pydantic model writes: $defs, and a reference to the whole
    params = {
        "type": "object",
        "$defs": {"Unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                  "Place": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                            "required": ["city"], "additionalProperties": False}},
        "properties": {"place": {"$ref": "#/$defs/Place"}, "unit": {"$ref": "#/$defs/Unit"}},
        "required": ["place", "unit"],
        "additionalProperties": False,
    }  # fmt: skip
    tools = parse_tools([{"type": "function", "function": {"name": "get_weather", "parameters": params}},
                         {"type": "function", "function": {"name": "nest", "parameters": {"type": "object", "properties": {
                             "child": {"$ref": "#"}}}}}])  # fmt: skip
    req = GenerationRequest(model="s", messages=(ChatMessage("user", "What is the weather in Oslo?"),), tools=tools,
                            tool_choice=parse_tool_choice({"type": "function", "function": {"name": "get_weather"}}, tools),
                            params=SamplingParams(temperature=0, max_tokens=60))  # fmt: skip
    final = list(llama_backend.stream(req))[-1]
    (call,) = final.tool_calls
    assert final.finish_reason == "tool_calls" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), params)


# Valid schemas llama-cpp-python's converter refused or misread (engine.backends.llamacpp.gbnf.converter_ready), as
# pydantic, LangChain and hand-written tool schemas write them: (schema, texts valid for it, texts not).
_CONVERTER_CASES = {
    "list[Any]": ({"type": "object", "properties": {"values": {"type": "array", "items": {}}}, "required": ["values"]},
                  ['{"values":[1,"a",{"b":null},[true]]}', '{"values":[]}'], ['{"values":5}', '{"values":[1,]}']),
    "a recursive model (#)": ({"type": "object", "properties": {"name": {"type": "string"}, "friends": {"type": "array", "items": {"$ref": "#"}}},
                               "required": ["name", "friends"]},
                              ['{"name":"a","friends":[{"name":"b","friends":[]}]}'], ['{"name":"a","friends":[{"name":1,"friends":[]}]}']),
    "a root reference": ({"$defs": {"A": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                                    "P": {"type": "object", "properties": {"addr": {"$ref": "#/$defs/A"}}, "required": ["addr"]}},
                          "$ref": "#/$defs/P"}, ['{"addr":{"city":"x"}}'], ['{"addr":{"city":1}}', '{"addr":{}}']),
    "a recursive root reference": ({"$defs": {"P": {"type": "object", "properties": {"name": {"type": "string"}, "kids": {
        "type": "array", "items": {"$ref": "#/$defs/P"}}}, "required": ["name", "kids"]}}, "$ref": "#/$defs/P"},
                                   ['{"name":"a","kids":[{"name":"b","kids":[]}]}'], ['{"name":"a","kids":[{"kids":[]}]}']),
    "boolean schemas": ({"type": "object", "properties": {"v": True, "w": {"type": "array", "items": True}, "x": False},
                         "required": ["v", "w"]}, ['{"v":[1],"w":[{"a":1},2]}', '{"v":null,"w":[]}'], ['{"v":1,"w":[],"x":1}']),
    "allOf with one reference": ({"type": "object", "$defs": {"C": {"enum": ["a", "b"]}},
                                  "properties": {"c": {"allOf": [{"$ref": "#/$defs/C"}], "description": "d"}}, "required": ["c"]},
                                 ['{"c":"a"}'], ['{"c":{}}', '{"c":"z"}']),
    "a property of any value": ({"type": "object", "properties": {"x": {"description": "anything"}}, "required": ["x"]},
                                ['{"x":"s"}', '{"x":[1]}', '{"x":null}', '{"x":{"y":2}}'], ['{"y":1}']),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_CONVERTER_CASES))
def test_schemas_the_converter_misread_hold_what_they_say(model, case):
    schema, valid, invalid = _CONVERTER_CASES[case]
    grammar = schema_to_gbnf(schema)
    for text in valid:
        jsonschema.validate(json.loads(text), schema)  # the cases themselves are right
        assert accepts(model, grammar, text), (case, text)
    for text in invalid:
        assert not accepts(model, grammar, text), (case, text)


def test_references_that_lead_only_to_each_other_are_refused_at_once():
    from engine.backends.llamacpp.sampler import grammar_for
    from engine.errors import InvalidRequest
    from engine.types import ResponseFormat

    for schema in ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
                   {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}):  # fmt: skip
        with pytest.raises(InvalidRequest, match="lead only to each other"):
            grammar_for(ResponseFormat(type="json_schema", schema=schema))
