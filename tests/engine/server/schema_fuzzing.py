"""Fuzzing the JSON schemas of constrained output against a running `hearth serve`.

A schema in a request becomes a grammar that native code (llama.cpp's GBNF parser and matcher, llguidance)
builds and runs inside the worker: a schema it cannot take may kill the process, and with it every
client's answers. :func:`schema_case` draws schemas over the keywords that make grammars large or odd:
counts at and around each bound of engine/schema_limits.py and values no count may take, nesting past
the depth limit, enums (long shared prefixes, quotes and backslashes, non-list ones), patterns with
nested repetition, ``$ref`` cycles and dangling or remote refs, ``const`` values, big numbers and types
that are not types. :func:`send` posts one through a dialect (OpenAI's ``response_format``, Ollama's
``format`` or a forced tool's parameters), and every answer must be a 200 or a 400 in one sentence (or
the 500 of a grammar that ended its own request: too slow, or no token can follow it), and the worker alive.

Used by tests/engine/server/test_fuzz.py (a bounded, seeded run) and benchmarks/fuzz.py (``--spec
schemas``, for as long as asked, new cases every round).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import httpx

# Counts at and around every bound (engine.schema_limits: 1,000 each, 20,000 in all) and values no count
# may take.
COUNTS: tuple[Any, ...] = (0, 1, 3, 999, 1000, 1001, 2000, 10_000, 20_000, 60_000, 2**31, 2**63, 10**30, -1, 2.5, 1e308,
                           "5", True, None)  # fmt: skip
PATTERNS = (
    "^[a-z]{0,1000}$", "^(a{0,50}){0,50}$", "^(a?){0,100}$", "^((ab){1,10}){0,100}$", "^(a+)+$", "^[\\w.]+@x\\.y$",
    "^\\d{3}-\\d{4}$", "(", "[", "a{2,1}", "^\\p{L}+$", "^.{1000}$", "(?<n>a)\\k<n>", "^(a|b|c|d|e){0,999}$",
)  # fmt: skip
NUMBERS: tuple[Any, ...] = (0, -1, 1.5, 1e308, -1e308, 2**63, 10**400, 1e-300)
ODD_TYPES: tuple[Any, ...] = ("foo", ["string", 5], None, [], ["null", "null"], 5, {"type": "string"})
ODD_SCHEMAS: tuple[Any, ...] = ({}, True, False, {"not": {}}, {"type": "string", "format": "date-time"},
                                {"if": {"type": "string"}, "then": {"maxLength": 3}}, {"x-unknown": {"maxLength": 10**9}})  # fmt: skip
TEXTS = ("", "a", 'quote " and \\ backslash', "\u00e9t\u00e9", "\U0001f600", "line\nbreak", "\x00", "x" * 300)


def _count(rng: random.Random) -> Any:
    return rng.choice(COUNTS)


def _counted(rng: random.Random, schema: dict, low: str, high: str) -> dict:
    for key in (low, high):
        if rng.random() < 0.5:
            schema[key] = _count(rng)
    return schema


def _enum_values(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice(("abc", {"a": 1}, [], 5))  # not a list of values
    n = rng.choice((1, 2, 10, 999, 1000, 1001, 2400))
    prefix = "shared-prefix-" * rng.choice((0, 1, 5, 20))
    odd = rng.random() < 0.3
    return [rng.choice((*TEXTS, None, 1, 2**63, {"k": [1]})) if odd and i % 7 == 0 else f"{prefix}{i}" for i in range(n)]


def _ref_case(rng: random.Random, depth: int) -> dict:
    kind = rng.randrange(6)
    if kind == 0:
        return {"$ref": "#"}
    if kind == 1:  # a def that is only itself
        return {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    if kind == 2:  # two defs that are each other
        return {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    if kind == 3:  # a proper recursive type: a list of lists
        return {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}, "maxItems": _count(rng)}}, "$ref": "#/$defs/t"}
    if kind == 4:
        return {"$ref": rng.choice(("#/$defs/missing", "https://example.invalid/schema.json", "other.json", "#/properties/~1"))}
    return {"type": "object", "properties": {"node": {"$ref": "#"}, "v": schema_case(rng, depth + 1)}}


def schema_case(rng: random.Random, depth: int = 0) -> Any:
    """One schema drawn at random (see the module's docstring); ``depth`` is how deep it is nested already."""
    kinds = ["string", "number", "enum", "const", "odd"]
    if depth < 3:
        kinds += ["array", "object", "union", "ref", "deep"]
    kind = rng.choice(kinds)
    if kind == "string":
        schema = _counted(rng, {"type": "string"}, "minLength", "maxLength")
        if rng.random() < 0.3:
            schema["pattern"] = rng.choice(PATTERNS)
        return schema
    if kind == "number":
        schema = {"type": rng.choice(("integer", "number"))}
        for key in rng.sample(("minimum", "maximum", "exclusiveMinimum", "multipleOf"), rng.randrange(3)):
            schema[key] = rng.choice(NUMBERS)
        return schema
    if kind == "enum":
        return {"type": "string", "enum": _enum_values(rng)} if rng.random() < 0.5 else {"enum": _enum_values(rng)}
    if kind == "const":
        return {"const": rng.choice((*TEXTS, 10**400, 2**63, 1e308, {"a": {"b": [1, None]}}, "y" * 70_000))}
    if kind == "odd":
        return rng.choice((*ODD_SCHEMAS, {"type": rng.choice(ODD_TYPES)}))
    if kind == "array":
        schema = _counted(rng, {"type": "array", "items": schema_case(rng, depth + 1)}, "minItems", "maxItems")
        if rng.random() < 0.2:
            schema["prefixItems"] = [schema_case(rng, depth + 1) for _ in range(rng.randrange(1, 4))]
        return schema
    if kind == "object":
        n = rng.choice((0, 1, 3, 100, 101, 300))
        props = {f"p{i}": schema_case(rng, 3) for i in range(n)}  # leaves only: a case stays small
        schema = {"type": "object", "properties": props, "required": rng.sample(sorted(props), min(n, rng.randrange(4)))}
        if rng.random() < 0.3:
            schema["additionalProperties"] = rng.choice((False, True, schema_case(rng, depth + 1)))
        return _counted(rng, schema, "minProperties", "maxProperties")
    if kind == "union":
        key = rng.choice(("anyOf", "oneOf", "allOf", "type"))
        n = rng.choice((0, 1, 2, 10, 101))
        if key == "type":
            return {"type": [rng.choice(("string", "integer", "null", "boolean", "array", "object")) for _ in range(n)]}
        return {key: [schema_case(rng, depth + 1) if i < 3 else {"const": i} for i in range(n)]}
    if kind == "ref":
        return _ref_case(rng, depth)
    nested: Any = {"type": "string"}  # "deep": past the depth limit, or just within it
    for _ in range(rng.choice((10, 32, 33, 40, 200))):
        nested = rng.choice(({"type": "array", "items": nested}, {"anyOf": [nested]}, {"type": "object", "properties": {"a": nested}}))
    return nested


@dataclass
class SchemaFindings:
    """What a run found: cases by dialect and status, and each answer that was neither 200 nor a 400 sentence."""

    cases: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.cases} schemas; statuses " + ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))]
        return "\n".join(lines + self.failures[:10])


DIALECTS = ("openai", "ollama", "tool")


def request_for(schema: Any, dialect: str, model: str) -> tuple[str, dict]:
    """(path, body) of a short greedy answer constrained by ``schema`` in ``dialect``."""
    messages = [{"role": "user", "content": "Answer in JSON."}]
    if dialect == "openai":
        fmt = {"type": "json_schema", "json_schema": {"name": "fuzz", "schema": schema}}
        return "/v1/chat/completions", {"model": model, "messages": messages, "response_format": fmt, "max_tokens": 3, "temperature": 0}
    if dialect == "ollama":
        return "/api/chat", {"model": model, "messages": messages, "format": schema, "stream": False,
                             "options": {"num_predict": 3, "temperature": 0}}  # fmt: skip
    params = schema if isinstance(schema, dict) and schema.get("type") == "object" else {"type": "object", "properties": {"x": schema}}
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    return "/v1/chat/completions", {"model": model, "messages": messages, "tools": [tool], "tool_choice": "required",
                                    "max_tokens": 3, "temperature": 0}  # fmt: skip


def send(client: httpx.Client, schema: Any, dialect: str, model: str, findings: SchemaFindings) -> None:
    """Post one case; anything but a 200 or a 400 whose message is a sentence is a finding (with its body)."""
    path, body = request_for(schema, dialect, model)
    content = json.dumps(body)
    findings.cases += 1
    try:
        r = client.post(path, content=content, headers={"Content-Type": "application/json"})
    except httpx.TransportError as exc:
        findings.failures.append(f"{dialect}: {type(exc).__name__} {exc}; body {content[:500]}")
        return
    findings.statuses[r.status_code] = findings.statuses.get(r.status_code, 0) + 1
    if r.status_code == 200:
        return
    error = r.json().get("error") if r.headers.get("content-type", "").startswith("application/json") else None
    message = error if isinstance(error, str) else (error or {}).get("message", "")
    # A grammar that proves too slow, or that no token can follow, ends its own request once it runs.
    ended = r.status_code == 500 and message.startswith("The output grammar")
    if (r.status_code != 400 and not ended) or not message.endswith("."):
        findings.failures.append(f"{dialect}: {r.status_code} {r.text[:300]}; body {content[:500]}")


def fuzz_schemas(root: str, headers: dict[str, str], model: str, *, seed: int | None, cases: int,
                 findings: SchemaFindings | None = None, timeout: float = 120.0) -> SchemaFindings:  # fmt: skip
    """Send ``cases`` drawn schemas (the same ones for the same ``seed``) to the server at ``root``, each
    through the next dialect in turn."""
    rng = random.Random(seed)
    findings = findings or SchemaFindings()
    with httpx.Client(base_url=root, headers=headers, timeout=timeout) as client:
        for i in range(cases):
            send(client, schema_case(rng), DIALECTS[i % len(DIALECTS)], model, findings)
    return findings


__all__ = ["schema_case", "request_for", "send", "fuzz_schemas", "SchemaFindings", "DIALECTS"]
