"""Chat answered from the user's document collections in one request: the ``hearth`` extension.

A chat request of any dialect may name collections, ``"hearth": {"collections": ["notes"]}``. Where the
dialects meet (chat completions' generation, :class:`engine.server.generation.Generation`), the
worker retrieves passages for the last user message with the same service ``POST /api/docs/context``
uses, adds them to the system prompt as the app did, and runs the chat; the answer carries the sources
in a top-level ``"hearth": {"sources": [...]}`` object (docs/api.md). A request without collections is
not touched.

Collections are files on the admin's disk. A request made with an inference key may name only those the
admin shared (``hearth docs share``, ``PUT /api/docs/collections/{name}/shared``): any other name, known
or not, gets the same 403, so names cannot be guessed; and its sources carry the file's name, not its
path. Without keys every request is the one user's and may name any collection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from engine.documents.errors import CollectionNotFound
from engine.documents.prompt import DocsContext
from engine.errors import AdminKeyRequired, InvalidRequest
from engine.server.api_models import ChatDocuments, HearthRequest
from engine.server.api_models.documents import (
    BUDGET_TOKENS,
    DEFAULT_BUDGET_TOKENS,
    DEFAULT_PASSAGES,
    PASSAGES,
)
from engine.types import ChatMessage, GenerationRequest

if TYPE_CHECKING:
    from engine.server.targets import Served

# The context is counted at four characters a token: it is given at most this share of the room the
# conversation and the answer leave, so text denser in tokens still fits.
FIT_SHARE = 0.75
_INDEXING = frozenset({"queued", "scanning", "parsing", "embedding"})
_EXAMPLE = '{"collections": ["notes"]}'


@dataclass(frozen=True, slots=True)
class DocumentsAsked:
    """The collections a chat request names, and how much of them may go into its prompt."""

    collections: tuple[str, ...]
    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    k: int = DEFAULT_PASSAGES


@dataclass(frozen=True, slots=True)
class Grounding:
    """What went into a grounded prompt: the context (its sources numbered as the prompt cites them)
    and the collections still being indexed (answered from what is indexed so far)."""

    context: DocsContext
    collections: tuple[str, ...]
    indexing: tuple[str, ...] = ()
    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    paths: bool = True  # the sources' paths and file URIs are shown (the admin key's), else their file names

    def extension(self) -> dict[str, Any]:
        """The answer's ``hearth`` object, in the shape the app reads it (api_models.ChatDocuments)."""
        return ChatDocuments.model_validate({
            "collections": list(self.collections),
            "sources": [_source(s.as_dict(), self.paths) for s in self.context.sources],
            "whole_documents": self.context.whole_documents,
            "budget_tokens": self.budget_tokens,
            "indexing": list(self.indexing),
        }).model_dump()  # fmt: skip


def _source(source: dict[str, Any], paths: bool) -> dict[str, Any]:
    """A source as the caller may see it: where the file is only for the admin key."""
    if paths:
        return source
    return {**source, "path": Path(source["path"]).name, "uri": None}


def _refusal(error: ValidationError) -> InvalidRequest:
    """The sentence for the first field of a ``hearth`` object that :class:`HearthRequest` refuses."""
    key = str(error.errors()[0]["loc"][0])
    if key == "collections":
        return InvalidRequest(
            f"'hearth.collections' must be a list of collection names, such as {_EXAMPLE}.", param="hearth.collections"
        )
    lo, hi = BUDGET_TOKENS if key == "budget_tokens" else PASSAGES
    return InvalidRequest(f"'hearth.{key}' must be a whole number from {lo} to {hi}.", param=f"hearth.{key}")


def documents_asked(body: Any) -> DocumentsAsked | None:
    """The collections a request body's ``hearth`` object names (None when it names none).

    Raises:
        InvalidRequest: ``hearth`` or its fields have the wrong shape.
    """
    extra = getattr(body, "model_extra", None) or {}
    raw = extra.get("hearth")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest(f"'hearth' must be an object, such as {_EXAMPLE}.", param="hearth")
    if raw.get("collections") in (None, []):
        return None  # the rest of the object is not read (nor refused) when it names no collection
    try:
        asked = HearthRequest.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc) from None
    return DocumentsAsked(
        collections=tuple(dict.fromkeys(asked.collections)), budget_tokens=asked.budget_tokens, k=asked.k
    )


def question_of(messages: Sequence[ChatMessage]) -> str:
    """The text of the last user message: what the collections are searched for.

    Raises:
        InvalidRequest: there is no user message with text.
    """
    for m in reversed(messages):
        if m.role == "user" and m.content.strip():
            return m.content
    raise InvalidRequest(
        "A chat that names document collections needs a user message to search them for; add one.", param="messages"
    )


def with_context(req: GenerationRequest, system: str) -> GenerationRequest:
    """``req`` with ``system`` after its system prompt (a system message of its own where it has none),
    worded as the app words it: the prompt, a blank line, the context."""
    messages = req.messages or ()
    if messages and messages[0].role in ("system", "developer"):
        first = replace(messages[0], content=f"{messages[0].content}\n\n{system}".strip())
        messages = (first, *messages[1:])
    else:
        messages = (ChatMessage("system", system), *messages)
    return replace(req, messages=messages)


def budget_for(served: Served, req: GenerationRequest, asked: DocumentsAsked) -> int:
    """The tokens the context may take: what was asked, within the room ``req``'s prompt and answer
    leave in one sequence of a local model (a remote model's context is its provider's to check)."""
    lm = served.lm
    if lm is None:
        return asked.budget_tokens
    stats = lm.backend.stats()
    n_ctx = stats.n_ctx_per_sequence if stats is not None else lm.backend.info.n_ctx
    answer = req.params.max_tokens or n_ctx // 4
    room = n_ctx - len(served.prompt_tokens(req)) - answer
    return max(0, min(asked.budget_tokens, int(room * FIT_SHARE)))


def _unknown(exc: CollectionNotFound) -> InvalidRequest:
    return InvalidRequest(
        f"There is no document collection named '{exc.name}'; name one that GET /api/docs/collections lists.",
        param="hearth.collections",
    )


# One answer for every collection an inference key may not use, there or not: names cannot be guessed.
NOT_SHARED = (
    "Document collections in a chat need the admin key, except those the admin shares "
    "(`hearth docs share NAME`); name a shared collection, or use the admin key."
)


def _not_shared() -> AdminKeyRequired:
    return AdminKeyRequired(NOT_SHARED, param="hearth.collections")


def check(app: Any, requests: Sequence[GenerationRequest], asked: DocumentsAsked, *, admin: bool = True) -> str:
    """The question ``requests`` ask of ``asked``'s collections, checked before a model is loaded for them
    (``admin``: the request holds the admin key, or no key is set).

    Raises:
        InvalidRequest: a collection is unknown, the request is a raw prompt, or it has no user message.
        AdminKeyRequired: without ``admin``, a collection is unknown or not shared.
    """
    from engine.server.docs_routes import service

    messages = requests[0].messages
    if messages is None:
        raise InvalidRequest(
            "Document collections answer a chat, not a raw prompt; leave out 'raw' or 'hearth.collections'.",
            param="hearth",
        )
    svc = service(app)
    for name in asked.collections:
        found = svc.index.find(name)
        if found is not None and (admin or found.shared):
            continue
        if not admin:
            raise _not_shared()
        raise _unknown(CollectionNotFound(name))
    return question_of(messages)


def ground(
    app: Any, served: Served, requests: Sequence[GenerationRequest], asked: DocumentsAsked, *, admin: bool = True
) -> tuple[list[GenerationRequest], Grounding]:
    """``requests`` with the context for their last user message from ``asked``'s collections, and what
    went in (``admin``: as :func:`check`; without it the sources name files, not paths). Blocking
    (searches and embeds): run it in a thread.

    Raises:
        InvalidRequest, AdminKeyRequired: as :func:`check` (a collection may be removed meanwhile).
    """
    from engine.server.docs_routes import service

    question = check(app, requests, asked, admin=admin)
    svc = service(app)
    budget = budget_for(served, requests[0], asked)
    try:
        context = svc.context(asked.collections, question, budget_tokens=budget, k=asked.k)
    except CollectionNotFound as exc:
        raise (_unknown(exc) if admin else _not_shared()) from exc
    indexing = tuple(n for n in asked.collections if (p := svc.progress(n)) is not None and p.phase in _INDEXING)
    grounding = Grounding(
        context=context, collections=asked.collections, indexing=indexing, budget_tokens=budget, paths=admin
    )
    return [with_context(r, context.system) for r in requests], grounding


def attach(payload: dict, grounding: Grounding | None) -> dict:
    """``payload`` with the ``hearth`` object of a grounded answer (as it is otherwise)."""
    if grounding is None:
        return payload
    return {**payload, "hearth": grounding.extension()}


__all__ = ["DocumentsAsked", "Grounding", "attach", "check", "documents_asked", "ground", "question_of", "with_context"]
