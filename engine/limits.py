"""The limits that keep one request from stalling the others (docs/api.md, "Limits").

Every dialect's request becomes the same engine types, so each limit is checked once, where those
types are built: stop lists in :class:`~engine.types.SamplingParams`, JSON schemas in
:class:`~engine.types.ResponseFormat` and :class:`~engine.tools.spec.ToolSpec` (engine/schema_limits.py
says why each schema bound is where it is), embedding inputs by the routes that take them. A request over
a limit is refused with a sentence naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.errors import InvalidRequest
from engine.pattern_shape import PatternShape, pattern_shape, repetition_product
from engine.schema_limits import (
    MAX_ALTERNATIVES,
    MAX_COUNT,
    MAX_COUNTS_TOTAL,
    MAX_EMPTY_REPEATS,
    MAX_ENUM_BYTES,
    MAX_ENUM_VALUES,
    MAX_PATTERN_LENGTH,
    MAX_PROPERTIES,
    MAX_REPETITION,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    check_pattern,
    check_schema,
)

# -- stop sequences ------------------------------------------------------------------------------
MAX_STOP_SEQUENCES = 16
MAX_STOP_LENGTH = 512

# -- embeddings ------------------------------------------------------------------------------------
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's own limit
MAX_RERANK_DOCUMENTS = 2048  # as many as embeddings' inputs: each is scored with the query


MAX_GRAMMAR_CHARS = 65_536  # a grammar's text (GBNF, Lark or a regular expression), as MAX_SCHEMA_BYTES bounds a schema
MAX_CHOICES = 1_000  # the texts of a choice, as MAX_ENUM_VALUES bounds an enum's values


def check_grammar(grammar: object, *, param: str) -> None:
    """A grammar is non-empty text within :data:`MAX_GRAMMAR_CHARS` (what it says is checked where it is compiled,
    by llguidance, which bounds its own nesting and work).

    Raises:
        InvalidRequest: it is not text, is empty, or is over the limit.
    """
    if not isinstance(grammar, str) or not grammar.strip():
        raise InvalidRequest(f"'{param}' must be the grammar's text.", param=param)
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise InvalidRequest(
            f"'{param}' is {len(grammar)} characters, over the limit of {MAX_GRAMMAR_CHARS}; simplify the grammar.", param=param
        )


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
    "MAX_COUNT",
    "MAX_COUNTS_TOTAL",
    "MAX_PROPERTIES",
    "MAX_ALTERNATIVES",
    "MAX_ENUM_VALUES",
    "MAX_ENUM_BYTES",
    "MAX_GRAMMAR_CHARS",
    "MAX_CHOICES",
    "PatternShape",
    "pattern_shape",
    "check_stops",
    "check_grammar",
    "check_embedding_inputs",
    "check_rerank_documents",
    "check_schema",
    "check_pattern",
    "repetition_product",
]
