"""``/api/docs``: document collections, their indexing, search hits and a chat's sources; and the ``hearth``
object, by which a chat request of any dialect names collections and its answer gives their sources."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, StrictInt, StrictStr, model_validator

from engine.server.api_models.base import Answer, Body

# How much of the collections goes into a prompt: ``POST /api/docs/context`` and a chat's ``hearth`` object.
BUDGET_TOKENS = (100, 200_000)  # the context's tokens, at most
PASSAGES = (1, 50)  # the passages retrieved, at most
DEFAULT_BUDGET_TOKENS = 1500
DEFAULT_PASSAGES = 8


class FileFailure(Answer):
    """A file that could not be indexed, and why, in one sentence."""

    path: str
    reason: str


class IndexProgress(Answer):
    """Where an indexing run is. ``phase``: scanning | parsing | embedding | done | cancelled | failed."""

    collection: str
    phase: str
    files_done: int = 0
    files_total: int = 0
    chunks: int = 0
    embedded: int = 0
    to_embed: int = 0
    files_per_s: float = 0.0
    chunks_per_s: float = 0.0
    embeddings_per_s: float = 0.0
    paused: bool = False
    failed: list[FileFailure] = []
    message: str | None = None


class DocCollection(Answer):
    """A collection: its sources, embedding model, how far its index has got, and a run in progress."""

    name: str
    model: str
    sources: list[str]
    files: int
    chunks: int
    embedded: int
    embeddings_pending: int
    failed: list[FileFailure] = []
    shared: bool = False  # chats made with an inference key may name it
    progress: IndexProgress | None = None


class CollectionList(Answer):
    collections: list[DocCollection]


class CollectionDeleted(Answer):
    deleted: str


class ProgressAnswer(Answer):
    progress: IndexProgress


class SearchHit(Answer):
    """A passage found: ``score`` is the fused score, or one kind of search's own."""

    chunk_id: int
    text: str
    path: str
    page: int | None = None
    heading: str | None = None
    score: float
    keyword_rank: int | None = None
    vector_rank: int | None = None
    keyword_score: float | None = None
    vector_score: float | None = None


class SearchAnswer(Answer):
    hits: list[SearchHit]
    modes: dict[str, str]  # the mode each collection was searched in


class DocSource(Answer):
    """One numbered passage given to the model, and where it came from."""

    number: int
    path: str  # where the file is; its name alone for a chat made with an inference key
    page: int | None = None
    heading: str | None = None
    place: str
    label: str  # "[2] manual.pdf, page 3"
    uri: str | None = None  # a file URI that opens the place (only for the admin key, as the path)
    text: str
    score: float | None = None
    keyword_score: float | None = None
    vector_score: float | None = None


class DocsContext(Answer):
    """The system message that carries the sources, the sources, and whether whole documents went in."""

    system: str
    sources: list[DocSource]
    whole_documents: bool = False


class ChatDocuments(Answer):
    """A chat answer's ``hearth`` object when its request named collections (docs/documents.md): the
    sources its prompt was given, numbered as the prompt cites them, and the collections still being
    indexed (answered from what is indexed so far)."""

    collections: list[str]
    sources: list[DocSource]
    whole_documents: bool = False
    budget_tokens: int
    indexing: list[str] = []


# -- request bodies of /api/docs: plain models (unknown fields are dropped, as they always were) --------
# ``POST /api/docs/collections``: a collection to make of ``paths`` and index.
class AddBody(BaseModel):
    name: str
    paths: list[str] = Field(min_length=1)
    model: str | None = None
    shared: bool | None = None  # chats made with an inference key may name it (None: as it is)


# ``PUT /api/docs/collections/NAME/shared``.
class SharedBody(BaseModel):
    shared: bool


# ``PUT /api/docs/collections/NAME/model``: the embedding model it is indexed with.
class ModelBody(BaseModel):
    model: str


# ``POST /api/docs/search``.
class SearchBody(BaseModel):
    collections: list[str] = Field(min_length=1)
    query: str
    k: int = 5
    mode: str = "auto"


# ``POST /api/docs/context``: the sources (with markers) a question gets from ``collections``.
class ContextBody(BaseModel):
    collections: list[str] = Field(min_length=1)
    question: str
    budget_tokens: int = Field(default=DEFAULT_BUDGET_TOKENS, ge=BUDGET_TOKENS[0], le=BUDGET_TOKENS[1])
    k: int = Field(default=DEFAULT_PASSAGES, ge=PASSAGES[0], le=PASSAGES[1])


# -- the hearth extension of a chat request (engine.server.docs_chat reads it from the body's extra fields) ---
def _named(name: str) -> str:
    if not name.strip():
        raise ValueError("a collection name is not blank")
    return name


class HearthRequest(Body):
    """A chat request's ``hearth`` object (docs/documents.md): the collections its answer comes from, and how
    much of them its prompt may take; null is the default. Strict: ``"k": "8"`` or ``true`` is refused."""

    collections: list[Annotated[StrictStr, AfterValidator(_named)]] = []  # none: the request is not grounded
    budget_tokens: Annotated[StrictInt, Field(ge=BUDGET_TOKENS[0], le=BUDGET_TOKENS[1])] = DEFAULT_BUDGET_TOKENS
    k: Annotated[StrictInt, Field(ge=PASSAGES[0], le=PASSAGES[1])] = DEFAULT_PASSAGES

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data
