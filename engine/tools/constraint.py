"""Constraints for tool calls: the exact shape the output must take, built from the tools' schemas.

When ``tool_choice`` is ``required`` or names a function, the answer must be a call: the family's
opening markup, a JSON object ``{"name": <one of the tools>, "arguments": <that tool's schema>}``,
the closing markup, and (with parallel calls) more calls after a separator. One
:class:`ToolCallConstraint` describes that; each backend compiles it for its own constraint engine
(llama.cpp: GBNF through :func:`call_schema`; the paged and MLX engines: llguidance through
:func:`to_lark`).

Under ``tool_choice: auto`` with ``strict`` tools (:func:`strict_call_constraint`) the same constraint waits
for its :attr:`~ToolCallConstraint.trigger`: the model writes freely until it opens a call outside its
thinking, and from there the call follows the schemas (:class:`engine.tools.call_watch.CallWatch`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import InvalidRequest
from engine.limits import check_schema
from engine.tools.spec import ToolChoice, ToolSpec

log = logging.getLogger(__name__)

# The markup the constrained output is written in, per family: (prefix, suffix, separator, arguments key).
# llama3 and mistral use their bare-JSON forms: their markers are control tokens that a text grammar
# cannot always name, and their parsers read the bare forms as calls.
_MARKUP: dict[str, tuple[str, str, str, str]] = {
    "hermes": ("<tool_call>\n", "\n</tool_call>", "\n", "arguments"),
    "generic": ("<tool_call>\n", "\n</tool_call>", "\n", "arguments"),
    "llama3": ("", "", "; ", "parameters"),
    "mistral": ("[", "]", ", ", "arguments"),
}


@dataclass(frozen=True, slots=True)
class ToolCallConstraint:
    """The output must be ``prefix call suffix`` once, or (``parallel``) several times joined by ``separator``.

    For ``mistral`` the prefix/suffix wrap the whole list and the separator joins calls inside it.
    """

    fmt: str
    tools: tuple[ToolSpec, ...]
    parallel: bool
    prefix: str
    suffix: str
    separator: str
    arguments_key: str
    #: For a call the model may choose to make (``tool_choice: auto`` with strict tools): the text the call
    #: starts with, from which on the output must follow the constraint (the prefix's start, then at most
    #: one space or newline before the call object). Empty for a forced call.
    trigger: str = ""

    @property
    def wraps_list(self) -> bool:
        return self.fmt == "mistral"

    def call_schema(self) -> dict[str, Any]:
        """The JSON schema of one call object (name first, then the arguments)."""
        return call_schema(self.tools, self.arguments_key)

    def relaxed(self, names: Collection[str]) -> ToolCallConstraint:
        """This constraint with the tools ``names`` taking any JSON object (a strict schema no grammar can hold)."""
        return replace(self, tools=tuple(replace(t, parameters=FREE_ARGUMENTS, strict=False) if t.name in names else t
                                         for t in self.tools))  # fmt: skip


# The keywords JSON Schema defines (validation, applicators, annotations). Others are to be ignored, as
# the standard says; llama.cpp's converter instead refuses a (sub)schema it cannot read any keyword of.
KEYWORDS = frozenset({
    "type", "properties", "required", "items", "prefixItems", "enum", "const", "anyOf", "oneOf", "allOf",
    "not", "if", "then", "else", "$ref", "$defs", "definitions", "additionalProperties", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "dependentRequired", "minItems", "maxItems",
    "uniqueItems", "contains", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "title", "description", "default", "examples",
    "$schema", "$id", "$comment", "nullable", "readOnly", "writeOnly", "deprecated", "contentMediaType",
    "contentEncoding",
})  # fmt: skip
_SUBSCHEMA = ("items", "not", "if", "then", "else", "contains", "propertyNames", "additionalProperties")
_SUBSCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def known_keywords(schema: Any) -> Any:
    """``schema`` without the keywords JSON Schema does not define, in every sub-schema: one made only of
    such keywords means any value, as it does to a validator."""
    if not isinstance(schema, Mapping):
        return schema
    out = {k: v for k, v in schema.items() if k in KEYWORDS}
    for key in _SUBSCHEMA:
        if isinstance(out.get(key), Mapping):
            out[key] = known_keywords(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [known_keywords(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: known_keywords(s) for name, s in out[key].items()}
    return out


def closed_objects(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that lists its properties and
    says nothing about others. Output valid for the result is valid for the original; llama.cpp's
    converter already reads schemas this way, and small models otherwise invent keys until max_tokens."""
    if isinstance(schema, list):
        return [closed_objects(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: closed_objects(v) if k not in ("const", "enum", "default", "examples") else v for k, v in schema.items()}
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {k: closed_objects(v) for k, v in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    for key in ("$defs", "definitions", "patternProperties"):
        if isinstance(schema.get(key), Mapping):
            out[key] = {k: closed_objects(v) for k, v in schema[key].items()}
    return out


def _object_schema(params: Mapping[str, Any]) -> dict[str, Any]:
    schema = closed_objects(known_keywords(dict(params)))
    schema.setdefault("type", "object")
    if "properties" not in schema and "additionalProperties" not in schema:
        schema["properties"] = {}
    return schema


def call_schema(tools: Sequence[ToolSpec], arguments_key: str = "arguments") -> dict[str, Any]:
    """A JSON schema accepting a call to any of ``tools`` with arguments valid for that tool.

    A tool whose parameters refer to parts of themselves (``$ref``: ``#/$defs/...``, ``#/definitions/...``,
    ``#`` for the whole, as a nested pydantic model writes them) keeps them at the call schema's root, where
    those references resolve: its parameters become ``$defs`` entries of their own, named for the tool.
    """
    defs: dict[str, Any] = {}
    options = []
    for i, t in enumerate(tools):
        params = _object_schema(t.parameters)
        if has_ref(params):
            params = hoisted(params, f"tool{i}", defs)
        options.append({
            "type": "object",
            "properties": {"name": {"const": t.name}, arguments_key: params},
            "required": ["name", arguments_key],
            "additionalProperties": False,
        })  # fmt: skip
    out = options[0] if len(options) == 1 else {"anyOf": options}
    if defs:
        out = {**out, "$defs": defs}
    return out


def has_ref(node: Any) -> bool:
    if isinstance(node, Mapping):
        return "$ref" in node or any(has_ref(v) for k, v in node.items() if k not in ("const", "enum", "default", "examples"))
    if isinstance(node, list):
        return any(has_ref(v) for v in node)
    return False


def hoisted(params: dict[str, Any], name: str, defs: dict[str, Any]) -> dict[str, Any]:
    """``params`` (one tool's parameters) moved to ``defs[name]``, its own definitions to ``defs[name + "-" + key]``,
    and every local reference in them pointed there; returns the reference to put where the parameters were."""
    own = {**(params.get("definitions") or {}), **(params.get("$defs") or {})}

    def point(ref: str) -> str:
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                key, _, rest = ref[len(prefix) :].partition("/")
                return f"#/$defs/{name}-{key}" + (f"/{rest}" if rest else "")
        if ref == "#" or ref.startswith("#/"):
            return f"#/$defs/{name}" + ref[1:]
        return ref  # not local: left for the grammar compiler to refuse

    def rewrite(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {k: (point(v) if k == "$ref" and isinstance(v, str)
                        else v if k in ("const", "enum", "default", "examples") else rewrite(v))
                    for k, v in node.items()}  # fmt: skip
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    body = {k: v for k, v in params.items() if k not in ("$defs", "definitions")}
    defs[name] = rewrite(body)
    for key, sub in own.items():
        defs[f"{name}-{key}"] = rewrite(sub)
    return {"$ref": f"#/$defs/{name}"}


def tool_call_constraint(
    fmt: str, tools: Sequence[ToolSpec], choice: ToolChoice | None, *, parallel: bool = False
) -> ToolCallConstraint | None:
    """The constraint for a request, or None when the model may answer freely (``auto``/``none``)."""
    if choice is None or not choice.forced or not tools:
        return None
    allowed = choice.callable(tools)
    for t in allowed:  # a forced call is a grammar: refuse parameters that would make it explode
        check_schema(t.parameters, param="tools", what=f"The parameters of tool '{t.name}'")
    prefix, suffix, sep, key = _MARKUP.get(fmt, _MARKUP["generic"])
    return ToolCallConstraint(
        fmt=fmt if fmt in _MARKUP else "generic",
        tools=allowed,
        parallel=parallel and choice.mode == "required",
        prefix=prefix,
        suffix=suffix,
        separator=sep,
        arguments_key=key,
    )


# The families whose calls start with a text the model writes, where a call it chooses to make can be held
# to the schemas from that text on (llama3 and mistral open theirs with control tokens or bare JSON, harmony
# with a message header, deepseek with markers of its own that no grammar here writes).
_TRIGGERED = ("hermes", "generic")


#: The arguments of a tool a call is not held to the schema of: any JSON object.
FREE_ARGUMENTS: dict[str, Any] = {"type": "object", "additionalProperties": True}


def strict_call_constraint(
    fmt: str, tools: Sequence[ToolSpec], choice: ToolChoice | None, *, parallel: bool = False
) -> ToolCallConstraint | None:
    """For ``tool_choice: auto`` with a ``strict`` tool among ``tools``, or ``allowed_tools`` naming some: the
    constraint a call the model chooses to make is held to, from the moment it opens one
    (:attr:`ToolCallConstraint.trigger`). The model may still answer in text; a call names one of the tools it
    may call, and a strict tool's arguments follow its schema (another tool's are any JSON object, as are those
    of a strict tool whose parameters are over a bound of engine.schema_limits: the request asked for no call, so
    it is not refused for one that cannot be held). None for another choice, nothing to hold, or a family whose
    calls open with a control token or no marker at all.
    """
    narrowed = False
    if choice is not None:
        if choice.mode != "auto":
            return None
        narrowed = choice.allowed is not None
        tools = choice.callable(tools)
    if not tools or not (narrowed or any(t.strict for t in tools)):
        return None
    if fmt not in _TRIGGERED:
        return None
    loose = set()
    for t in tools:
        if t.strict:
            try:
                check_schema(t.parameters, param="tools", what=f"The parameters of tool '{t.name}'")
            except InvalidRequest as exc:
                log.info("a call of strict tool %r is left free: %s", t.name, exc)
                loose.add(t.name)
    held = tuple(t if t.strict and t.name not in loose else replace(t, parameters=FREE_ARGUMENTS, strict=False) for t in tools)
    prefix, suffix, sep, key = _MARKUP[fmt]
    return ToolCallConstraint(fmt=fmt, tools=held, parallel=parallel, prefix=prefix, suffix=suffix, separator=sep,
                              arguments_key=key, trigger=prefix.rstrip())  # fmt: skip


def _lark_str(text: str) -> str:
    return json.dumps(text)


# llguidance's JSON options: single spaces after separators, no free whitespace (a small model
# otherwise pads a call with newlines until max_tokens), unknown keywords ignored.
GUIDANCE_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}


def to_lark(constraint: ToolCallConstraint) -> str:
    """The constraint as an llguidance Lark grammar (the call object through ``%json``)."""
    schema = json.dumps({**constraint.call_schema(), "x-guidance": GUIDANCE_JSON_OPTIONS}, separators=(",", ":"))
    lines = [f"call: %json {schema}"]
    if constraint.wraps_list:
        body = f"call ({_lark_str(constraint.separator)} call)*" if constraint.parallel else "call"
        lines.insert(0, f"start: {_lark_str(constraint.prefix)} {body} {_lark_str(constraint.suffix)}")
    else:
        opening = _lark_str(constraint.prefix) if constraint.prefix else ""
        if constraint.trigger:  # what the model opened the call with: at most one space or newline after it
            opening = f'{_lark_str(constraint.trigger)} ("\\n" | " ")?'
        one = " ".join(p for p in (opening, "call", _lark_str(constraint.suffix) if constraint.suffix else "") if p)
        body = f"{one} ({_lark_str(constraint.separator)} {one})*" if constraint.parallel else one
        lines.insert(0, f"start: {body}")
    return "\n".join(lines) + "\n"


__all__ = [
    "FREE_ARGUMENTS", "ToolCallConstraint", "call_schema", "tool_call_constraint", "strict_call_constraint", "to_lark", "GUIDANCE_JSON_OPTIONS", "closed_objects",
    "known_keywords",
]  # fmt: skip
