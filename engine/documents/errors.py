"""Errors of document collections; each message says what to do."""

from __future__ import annotations

from engine.errors import HearthError


class CollectionNotFound(HearthError):
    """No collection has the requested name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"There is no collection named '{name}'; run `hearth docs list` to see them.")


class CollectionExists(HearthError):
    """A collection of that name exists already (raised where adding would be a mistake)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"A collection named '{name}' exists already; choose another name.")


class DocumentParseError(HearthError):
    """A file could not be read as the kind of document its name says."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Could not read {path}: {reason}")


class UnsupportedDocument(DocumentParseError):
    """A file whose kind Hearth does not index."""


class IndexCancelled(Exception):
    """The indexing run was cancelled; what was written before the file being read stays, and none of that file."""


class EmbeddingModelError(HearthError):
    """The embedding model could not be set up or does not make embeddings."""
