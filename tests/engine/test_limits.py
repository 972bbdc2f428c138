"""The limits that keep one request from stalling the others: where each is checked, and what it refuses."""

from __future__ import annotations

import pytest

from engine.errors import InvalidRequest, SchemaTooComplex
from engine.limits import (
    MAX_EMPTY_REPEATS,
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
