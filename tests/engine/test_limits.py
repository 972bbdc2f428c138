"""The limits that keep one request from stalling the others: where each is checked, and what it refuses."""

from __future__ import annotations

import pytest

from engine.errors import InvalidRequest, SchemaTooComplex
from engine.limits import (
    MAX_ALTERNATIVES,
    MAX_COUNT,
    MAX_COUNTS_TOTAL,
    MAX_EMPTY_REPEATS,
    MAX_ENUM_BYTES,
    MAX_ENUM_VALUES,
    MAX_PROPERTIES,
    MAX_REPETITION,
    MAX_STOP_LENGTH,
    MAX_STOP_SEQUENCES,
    check_embedding_inputs,
    check_schema,
    pattern_shape,
    repetition_product,
)
from engine.tools.constraint import tool_call_constraint
from engine.tools.spec import ToolChoice, ToolSpec
from engine.types import ResponseFormat, SamplingParams

EXPLODING = {"type": "string", "pattern": "^(a{0,50}){0,50}$"}


@pytest.mark.parametrize(
    ("pattern", "product"),
    [
        ("^(a{0,50}){0,50}$", 2500),
        ("a{0,50}", 50),
        ("a{5}b{7}", 7),  # siblings do not multiply
        (r"^\d{3}-\d{4}$", 4),
        ("[a-z]{2,8}(x|y){3}", 8),
        ("((ab){2}c){3}", 6),
        ("(a+)+", 1),  # unbounded repetition is one recursive rule, not a copy per count
        ("[{]{3}", 3),  # a brace in a class is not a quantifier
        ("a{x}", 1),  # nor is a brace that does not hold a count
    ],
)
def test_repetition_product_multiplies_nested_bounds_only(pattern, product):
    assert repetition_product(pattern) == product


@pytest.mark.parametrize(
    ("pattern", "repeats"),
    [
        ("(a?){0,100}", 100),
        ("(a{0,10}){0,10}", 10),
        ("(x(a{0,5}){0,10}){0,10}", 100),  # a repeated group around an empty-able one multiplies it
        ("(a|){0,20}", 20),
        ("(a{1,50}){0,50}", 1),  # the inner group always takes a character
        ("(a*)*", 1),
        ("(?:a?){0,30}", 30),
    ],
)
def test_repeats_of_a_group_that_can_match_nothing_are_counted(pattern, repeats):
    assert pattern_shape(pattern).empty_repeats == repeats


def test_a_repeated_group_that_can_match_nothing_is_refused():
    with pytest.raises(SchemaTooComplex, match=str(MAX_EMPTY_REPEATS)):
        check_schema({"type": "string", "pattern": "(a?){0,100}"}, param="response_format")
    check_schema({"type": "string", "pattern": "(a{0,10}){0,10}"}, param="response_format")


def test_the_exploding_regex_is_refused_naming_the_limit():
    with pytest.raises(SchemaTooComplex) as err:
        ResponseFormat(type="json_schema", schema=EXPLODING)
    assert str(MAX_REPETITION) in str(err.value) and err.value.param == "response_format"


def test_a_pattern_deep_in_the_schema_is_found():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"anyOf": [{"type": "integer"}, EXPLODING]}}}}
    with pytest.raises(SchemaTooComplex):
        check_schema(schema, param="response_format")


def test_deep_nesting_and_huge_schemas_are_refused():
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaTooComplex, match="nests deeper"):
        check_schema(deep, param="response_format")
    huge = {"type": "object", "properties": {f"field_{i}": {"type": "string", "description": "x" * 100} for i in range(1000)}}
    with pytest.raises(SchemaTooComplex, match="bytes"):
        check_schema(huge, param="response_format")


def test_ordinary_schemas_pass():
    schema = {
        "type": "object",
        "properties": {
            "email": {"type": "string", "pattern": r"^[\w.+-]+@[\w-]+\.[a-z]{2,10}$"},
            "phone": {"type": "string", "pattern": r"^\+?\d{1,3}[ -]?\d{3}[ -]?\d{4}$"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
        },
    }
    ResponseFormat(type="json_schema", schema=schema)


def test_a_forced_tool_with_an_exploding_parameter_is_refused_and_an_offered_one_is_not():
    tool = ToolSpec(name="f", parameters={"type": "object", "properties": {"x": EXPLODING}})
    with pytest.raises(SchemaTooComplex, match="tool 'f'") as err:
        tool_call_constraint("hermes", [tool], ToolChoice(mode="required"))
    assert err.value.param == "tools"
    assert tool_call_constraint("hermes", [tool], ToolChoice(mode="auto")) is None


def test_stop_lists_are_capped_in_count_and_length():
    SamplingParams(stop=tuple(f"s{i}" for i in range(MAX_STOP_SEQUENCES)))
    SamplingParams(stop=("x" * MAX_STOP_LENGTH,))
    with pytest.raises(InvalidRequest, match=str(MAX_STOP_SEQUENCES)) as err:
        SamplingParams(stop=tuple(f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)))
    assert err.value.param == "stop"
    with pytest.raises(InvalidRequest, match=str(MAX_STOP_LENGTH)):
        SamplingParams(stop=("x" * (MAX_STOP_LENGTH + 1),))


def test_embedding_inputs_are_capped():
    check_embedding_inputs(2048)
    with pytest.raises(InvalidRequest, match="2048"):
        check_embedding_inputs(2049)


# -- the bounds of engine.schema_limits: counts, properties, alternatives, enums -----------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": 20_000},  # this one killed the worker inside llama.cpp's parser
        {"type": "string", "maxLength": 60_000},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 60_000},
        {"type": "string", "minLength": MAX_COUNT + 1},
        {"type": "object", "maxProperties": MAX_COUNT + 1},
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string", "maxLength": 5000}}}},
    ],
    ids=["maxLength-20k", "maxLength-60k", "maxItems-60k", "minLength", "maxProperties", "deep"],
)
def test_a_count_over_the_limit_is_refused_naming_it(schema):
    with pytest.raises(SchemaTooComplex, match=f"over the limit of {MAX_COUNT};") as err:
        ResponseFormat(type="json_schema", schema=schema)
    assert err.value.param == "response_format"


@pytest.mark.parametrize("value", [-1, 2.5, "5", True, None])
def test_a_count_that_is_not_a_whole_number_is_refused(value):
    with pytest.raises(SchemaTooComplex, match="must be a whole number from 0 to"):
        check_schema({"type": "string", "maxLength": value}, param="response_format")


def test_the_counts_of_a_schema_are_bounded_together():
    def fields(n: int) -> dict:
        return {"type": "object", "properties": {f"f{i}": {"type": "string", "maxLength": MAX_COUNT} for i in range(n)}}

    check_schema(fields(MAX_COUNTS_TOTAL // MAX_COUNT), param="response_format")
    with pytest.raises(SchemaTooComplex, match=str(MAX_COUNTS_TOTAL)):
        check_schema(fields(MAX_COUNTS_TOTAL // MAX_COUNT + 1), param="response_format")
    # a pattern's repetitions count as well
    with pytest.raises(SchemaTooComplex, match=str(MAX_COUNTS_TOTAL)):
        check_schema({**fields(MAX_COUNTS_TOTAL // MAX_COUNT), "propertyNames": {"pattern": "^[a-z]{1,20}$"}}, param="x")


def test_an_object_of_too_many_properties_is_refused_and_allof_parts_add_up():
    props = {f"p{i}": {"type": "integer"} for i in range(MAX_PROPERTIES)}
    check_schema({"type": "object", "properties": props}, param="response_format")
    with pytest.raises(SchemaTooComplex, match=str(MAX_PROPERTIES)):
        check_schema({"type": "object", "properties": {**props, "one_more": {}}}, param="response_format")
    half = {f"p{i}": {"type": "integer"} for i in range(MAX_PROPERTIES // 2 + 1)}
    merged = {"$defs": {"a": {"properties": half}}, "allOf": [{"$ref": "#/$defs/a"}, {"properties": half}]}
    with pytest.raises(SchemaTooComplex, match=str(MAX_PROPERTIES)):
        check_schema(merged, param="response_format")


def test_alternatives_open_at_one_place_multiply_and_others_do_not():
    ten = [{"const": i} for i in range(10)]
    check_schema({"anyOf": [{"anyOf": ten}] * 10}, param="response_format")  # 100
    with pytest.raises(SchemaTooComplex, match=str(MAX_ALTERNATIVES)):
        check_schema({"anyOf": [{"anyOf": ten}] * 11}, param="response_format")
    with pytest.raises(SchemaTooComplex, match=str(MAX_ALTERNATIVES)):
        check_schema({"anyOf": [{"type": "integer"}] * (MAX_ALTERNATIVES + 1)}, param="response_format")
    nullable: dict = {"type": "integer"}
    for _ in range(10):  # 2**10 along the path, but each behind a key of its own object
        nullable = {"anyOf": [{"type": "object", "properties": {"x": nullable}}, {"type": "null"}]}
    check_schema(nullable, param="response_format")


def test_enums_are_bounded_in_values_and_bytes():
    check_schema({"enum": list(range(MAX_ENUM_VALUES))}, param="response_format")
    with pytest.raises(SchemaTooComplex, match=str(MAX_ENUM_VALUES)):
        check_schema({"enum": list(range(MAX_ENUM_VALUES + 1))}, param="response_format")
    split = {"properties": {"a": {"enum": list(range(MAX_ENUM_VALUES))}, "b": {"enum": ["one more"]}}}
    with pytest.raises(SchemaTooComplex, match=str(MAX_ENUM_VALUES)):  # for the whole schema
        check_schema(split, param="response_format")
    with pytest.raises(SchemaTooComplex, match=str(MAX_ENUM_BYTES)):
        check_schema({"enum": ["x" * 100] * 200}, param="response_format")
    with pytest.raises(SchemaTooComplex, match="not a list"):
        check_schema({"enum": "abc"}, param="response_format")


def test_the_grammar_builders_check_a_schema_that_skipped_the_types():
    """A ResponseFormat made past its own check (as a benchmark does) is still refused by each backend's builder."""
    from engine.backends.llamacpp.sampler import grammar_for as gbnf_for
    from engine.tools.guidance import grammar_for as guidance_for

    fmt = object.__new__(ResponseFormat)
    object.__setattr__(fmt, "type", "json_schema")
    object.__setattr__(fmt, "schema", {"type": "string", "maxLength": 20_000})
    with pytest.raises(SchemaTooComplex, match=str(MAX_COUNT)):
        gbnf_for(fmt)
    with pytest.raises(SchemaTooComplex, match=str(MAX_COUNT)):
        guidance_for(None, fmt)


@pytest.mark.parametrize("pattern", ["^[z-a]$", "^(((($", "a)", "*a", "a**"])
def test_a_pattern_that_is_no_regular_expression_is_a_400_naming_it(pattern):
    with pytest.raises(InvalidRequest, match="which is no regular expression") as refused:
        check_schema({"type": "string", "pattern": pattern}, param="response_format")
    assert not isinstance(refused.value, SchemaTooComplex) and refused.value.param == "response_format"


@pytest.mark.parametrize("pattern", [r"^(a)\1$", r"(?P<x>a)(?P=x)", r"(?<x>a)\k<x>", r"a\\\2"])
def test_a_back_reference_is_a_400_naming_the_tool_it_is_in(pattern):
    from engine.tools import parse_tool_choice, parse_tools
    from engine.tools.constraint import tool_call_constraint

    tools = parse_tools([{"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}}}])  # fmt: skip
    with pytest.raises(InvalidRequest, match="back-reference") as refused:
        tool_call_constraint("hermes", tools, parse_tool_choice("required", tools))
    assert refused.value.param == "tools" and "'pick'" in str(refused.value)
    check_schema({"type": "string", "pattern": r"\\1 and \\2"}, param="response_format")  # escaped backslashes: text


@pytest.mark.parametrize("pattern", [r"^\p{L}+$", r"(?<year>[0-9]{4})", r"^\d{3}-\d{4}$", "[]", r"\cJ"])
def test_ecma_syntax_python_lacks_is_left_to_the_grammar_compilers(pattern):
    check_schema({"type": "string", "pattern": pattern}, param="response_format")


def _recursive(alternatives: list) -> dict:
    return {"type": "object", "$defs": {"L": {"anyOf": alternatives}}, "properties": {"x": {"$ref": "#/$defs/L"}}}


def test_a_schema_that_refers_to_itself_through_alternatives_that_start_alike_is_refused():
    # each "[" keeps both alternatives open, so llama.cpp's parse stacks doubled with every level (a stall)
    nested = {"type": "array", "items": {"$ref": "#/$defs/L"}, "minItems": 1}
    with pytest.raises(SchemaTooComplex, match="refers to itself"):
        check_schema(_recursive([nested, nested]), param="tools")
    objects = {"type": "object", "properties": {"a": {"$ref": "#/$defs/L"}}}
    with pytest.raises(SchemaTooComplex, match="refers to itself"):  # two objects: both start with "{"
        check_schema(_recursive([objects, {"type": "object", "properties": {"b": {"$ref": "#/$defs/L"}}}]), param="tools")
    # alternatives told apart by their first character, alike ones of which at most one refers back, and
    # self-references with none: fine
    check_schema(_recursive([nested, {"type": "string"}]), param="tools")
    check_schema(_recursive([{"type": "number"}, nested, {"type": "integer"}, {"type": "array", "items": {"type": "string"}}]), param="tools")
    node = {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]},
                                             "kids": {"type": "array", "items": {"$ref": "#/$defs/N"}}}}  # fmt: skip
    check_schema({"type": "object", "$defs": {"N": node}, "properties": {"root": {"$ref": "#/$defs/N"}}}, param="tools")
    check_schema({"type": "object", "properties": {"child": {"$ref": "#"}, "name": {"type": "string"}}}, param="tools")


def test_alternatives_reached_through_references_multiply_as_nested_ones_do():
    defs: dict = {"D0": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}
    for i in range(1, 8):
        defs[f"D{i}"] = {"anyOf": [{"$ref": f"#/$defs/D{i - 1}"}, {"$ref": f"#/$defs/D{i - 1}"}]}
    with pytest.raises(SchemaTooComplex, match="alternatives at one place"):
        check_schema({"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/D7"}}}, param="tools")
    # a definition used in many places is counted once, where it is defined
    enum = {"type": "string", "enum": [f"v{i}" for i in range(600)]}
    props = {f"p{i}": {"$ref": "#/$defs/E"} for i in range(20)}
    check_schema({"type": "object", "$defs": {"E": enum}, "properties": props}, param="tools")

