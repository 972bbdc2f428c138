"""Schemas as the constraint engines get them: keywords JSON Schema does not define are ignored."""

from __future__ import annotations

from engine.tools.constraint import known_keywords


def test_unknown_keywords_are_dropped_in_every_subschema_and_property_names_are_kept():
    schema = {
        "type": "object",
        "x-vendor": {"anything": 1},
        "properties": {
            "x-vendor": {"type": "string", "ui:widget": "text"},  # a property may be named like a keyword
            "tags": {"type": "array", "items": {"type": "string", "🙂": True}, "maxItems": 3},
            "free": {"": {}, "weird": [1, 2]},  # only unknown keywords: any value
        },
        "anyOf": [{"required": ["tags"], "note": "x"}],
        "$defs": {"d": {"const": 1, "?": 2}},
    }
    assert known_keywords(schema) == {
        "type": "object",
        "properties": {
            "x-vendor": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "free": {},
        },
        "anyOf": [{"required": ["tags"]}],
        "$defs": {"d": {"const": 1}},
    }
    assert known_keywords(True) is True and known_keywords({"": {}}) == {}


def test_a_schema_that_is_not_an_object_is_a_clear_refusal_for_llguidance():
    """The paged and MLX backends' grammar builder: `true` as a schema was a TypeError (a 500), not a 400."""
    import pytest

    from engine.errors import InvalidRequest
    from engine.tools.guidance import grammar_for
    from engine.types import ResponseFormat

    with pytest.raises(InvalidRequest, match="must be a JSON object") as err:
        grammar_for(None, ResponseFormat(type="json_schema", schema=True))  # pyright: ignore[reportArgumentType]
    assert err.value.param == "response_format"
