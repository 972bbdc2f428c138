"""Answers of ``/api/docs``: document collections, their indexing, search hits and a chat's sources."""

from __future__ import annotations

from pydantic import BaseModel, Field

from engine.server.api_models.base import Answer


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
    budget_tokens: int = Field(default=1500, ge=100, le=200_000)
    k: int = Field(default=8, ge=1, le=50)
