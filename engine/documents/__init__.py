"""Chat with your documents: collections of files, parsed along their structure, indexed for keyword
and vector search in SQLite, and retrieved into prompts with citations."""

from engine.documents.embedding import BackendEmbedder, Embedder, ManagerEmbedder
from engine.documents.errors import CollectionNotFound, DocumentParseError, EmbeddingModelError
from engine.documents.index import DocumentIndex
from engine.documents.indexer import IndexControl, Indexer
from engine.documents.minilm import DEFAULT_MODEL, ensure_default_model
from engine.documents.parsing import parse_file
from engine.documents.prompt import DocsContext, Source, build_context, cited
from engine.documents.service import DocumentService
from engine.documents.types import CollectionInfo, IndexProgress, SearchHit

__all__ = [
    "DEFAULT_MODEL",
    "BackendEmbedder",
    "CollectionInfo",
    "CollectionNotFound",
    "DocsContext",
    "DocumentIndex",
    "DocumentParseError",
    "DocumentService",
    "Embedder",
    "EmbeddingModelError",
    "IndexControl",
    "IndexProgress",
    "Indexer",
    "ManagerEmbedder",
    "SearchHit",
    "Source",
    "build_context",
    "cited",
    "ensure_default_model",
    "parse_file",
]
