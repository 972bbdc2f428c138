"""The output constraints of a chat or completion request, in the forms OpenAI-compatible servers take them.

OpenAI's ``response_format`` (text, a JSON object, a JSON schema); vLLM's ``structured_outputs`` (``json``,
``json_object``, ``regex``, ``choice``, ``grammar``) and the ``guided_*`` fields it took before; llama-server's
``grammar`` (GBNF) and ``json_schema``. A request gives one of them: each becomes the engine's one
:class:`~engine.types.ResponseFormat`, enforced the same way by every backend (docs/api.md, "Structured output").
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.errors import InvalidRequest
from engine.server.schemas import ResponseFormatBody
from engine.types import ResponseFormat

#: vLLM's structured-output keys Hearth reads; its options (``whitespace_pattern``, ``disable_any_whitespace``...)
#: are accepted and left, as vLLM's backends may leave them.
_STRUCTURED_KEYS = ("json", "json_object", "regex", "choice", "grammar")


_GBNF_RULE = re.compile(r"^[ \t]*[A-Za-z][\w-]*[ \t]*::=", re.MULTILINE)


def grammar_syntax(text: str) -> str:
    """GBNF (llama.cpp's, and the EBNF vLLM's xgrammar reads: a line that starts ``name ::=``), else Lark."""
    return "gbnf" if _GBNF_RULE.search(text) else "lark"


def _grammar(text: Any, param: str) -> ResponseFormat:
    if not isinstance(text, str):
        raise InvalidRequest(f"'{param}' must be the grammar's text.", param=param)
    return ResponseFormat(type="grammar", grammar=text, syntax=grammar_syntax(text), param=param)  # type: ignore[arg-type]


def _regex(text: Any, param: str) -> ResponseFormat:
    if not isinstance(text, str):
        raise InvalidRequest(f"'{param}' must be a regular expression, as text.", param=param)
    return ResponseFormat(type="grammar", grammar=text, syntax="regex", param=param)


def _schema(value: Any, param: str) -> ResponseFormat:
    if isinstance(value, str):  # vLLM takes the schema as JSON text too
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidRequest(f"'{param}' must be a JSON schema (an object, or its JSON text).", param=param) from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"'{param}' must be a JSON schema (an object, or its JSON text).", param=param)
    return ResponseFormat(type="json_schema", schema=value, param=param)


def _openai(rf: ResponseFormatBody) -> ResponseFormat | None:
    if rf.type == "text":
        return None
    if rf.type == "json_object" or rf.json_schema is None or rf.json_schema.schema_ is None:
        return ResponseFormat(type="json_object")  # a json_schema format without a schema: any object
    return ResponseFormat(type="json_schema", schema=rf.json_schema.schema_)


def _vllm(value: Any) -> list[ResponseFormat]:
    if not isinstance(value, dict):
        raise InvalidRequest("'structured_outputs' must be an object such as {\"regex\": \"...\"}.", param="structured_outputs")
    if value.get("structural_tag") is not None:
        raise InvalidRequest("'structured_outputs.structural_tag' is not taken here; give json, regex, choice or grammar.",
                             param="structured_outputs")  # fmt: skip
    found = []
    for key in _STRUCTURED_KEYS:
        given = value.get(key)
        if given is None or given is False or given == "":  # left out, as clients that send every field leave them
            continue
        param = f"structured_outputs.{key}"
        if key == "json_object":
            if given is not True:
                raise InvalidRequest(f"'{param}' must be true or false.", param=param)
            found.append(ResponseFormat(type="json_object", param=param))
        elif key == "json":
            found.append(_schema(given, param))
        elif key == "regex":
            found.append(_regex(given, param))
        elif key == "choice":
            found.append(ResponseFormat.choice(given, param=param))
        else:
            found.append(_grammar(given, param))
    return found


def requested_format(body: Any) -> ResponseFormat:
    """The one output constraint of a chat or completion ``body``, whichever field gave it (text when none did).

    Raises:
        InvalidRequest: a field's value is malformed, or the request gives more than one constraint.
    """
    extra = body.model_extra or {}
    found: list[ResponseFormat] = []
    if body.response_format is not None and (fmt := _openai(body.response_format)) is not None:
        found.append(fmt)
    if extra.get("structured_outputs") is not None:
        found.extend(_vllm(extra["structured_outputs"]))
    legacy = {
        "guided_json": _schema, "guided_regex": _regex, "guided_grammar": _grammar, "grammar": _grammar,
        "json_schema": _schema,
    }  # fmt: skip
    for key, read in legacy.items():
        if extra.get(key) is not None and extra[key] != "":  # "" is left out (llama.cpp's own pages send it unset)
            found.append(read(extra[key], key))
    if extra.get("guided_choice") is not None:
        found.append(ResponseFormat.choice(extra["guided_choice"], param="guided_choice"))
    if (flag := extra.get("guided_json_object")) is not None and flag is not False:
        if flag is not True:
            raise InvalidRequest("'guided_json_object' must be true or false.", param="guided_json_object")
        found.append(ResponseFormat(type="json_object", param="guided_json_object"))
    if len(found) > 1:
        raise InvalidRequest(
            f"The request constrains its output {len(found)} ways ({', '.join(f.param for f in found)}); give one.",
            param=found[1].param,
        )
    return found[0] if found else ResponseFormat()


__all__ = ["grammar_syntax", "requested_format"]
