"""What the document index works with: sections of a parsed file, chunks, hits, progress."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text from one place in a document: a PDF page, or the body under a heading.

    Args:
        text: The text, paragraphs separated by blank lines.
        page: The 1-based page number (PDF), else None.
        heading: The heading path ("Install > Linux") the text sits under, else None.
    """

    text: str
    page: int | None = None
    heading: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A file's text, in reading order, with the title the file gives itself (if any)."""

    path: str
    kind: str
    sections: tuple[Section, ...]
    title: str | None = None

    @property
    def pages(self) -> int:
        return len({s.page for s in self.sections if s.page is not None})


@dataclass(frozen=True, slots=True)
class Chunk:
    """A passage small enough to embed and to quote, with where it came from."""

    text: str
    ordinal: int
    page: int | None = None
    heading: str | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked passage: its text, file, place, and the scores that ranked it.

    ``score`` is the fused score (reciprocal rank fusion) or, for one kind of search alone, that kind's
    own score (BM25 as a positive number, higher is better; cosine similarity for vectors).
    """

    chunk_id: int
    text: str
    path: str
    page: int | None
    heading: str | None
    score: float
    keyword_rank: int | None = None
    vector_rank: int | None = None
    keyword_score: float | None = None
    vector_score: float | None = None

    @property
    def place(self) -> str:
        """Where the passage is, for a person: "page 3", "Install > Linux", or ""."""
        if self.page is not None:
            return f"page {self.page}" + (f", {self.heading}" if self.heading else "")
        return self.heading or ""

    def as_dict(self) -> dict:
        return {
            "chunk_id": self.chunk_id,
            "text": self.text,
            "path": self.path,
            "page": self.page,
            "heading": self.heading,
            "score": self.score,
            "keyword_rank": self.keyword_rank,
            "vector_rank": self.vector_rank,
            "keyword_score": self.keyword_score,
            "vector_score": self.vector_score,
        }


@dataclass(frozen=True, slots=True)
class FileFailure:
    """A file that could not be indexed, and why, in one sentence."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    """A collection as listed: its name, sources, model, and how far its index has got."""

    name: str
    model: str
    sources: tuple[str, ...]
    files: int
    chunks: int
    embedded: int
    failed: tuple[FileFailure, ...] = ()
    shared: bool = False  # chats made with an inference key may use it (the admin shared it)

    @property
    def embeddings_pending(self) -> int:
        return self.chunks - self.embedded

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "sources": list(self.sources),
            "files": self.files,
            "chunks": self.chunks,
            "embedded": self.embedded,
            "embeddings_pending": self.embeddings_pending,
            "failed": [{"path": f.path, "reason": f.reason} for f in self.failed],
            "shared": self.shared,
        }


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Where an indexing run is: files parsed, chunks written, embeddings made, and rates.

    ``phase`` is "scanning", "parsing", "embedding", "done", "cancelled" or "failed".
    """

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
    failed: tuple[FileFailure, ...] = field(default_factory=tuple)
    message: str | None = None

    def as_dict(self) -> dict:
        return {
            "collection": self.collection,
            "phase": self.phase,
            "files_done": self.files_done,
            "files_total": self.files_total,
            "chunks": self.chunks,
            "embedded": self.embedded,
            "to_embed": self.to_embed,
            "files_per_s": round(self.files_per_s, 2),
            "chunks_per_s": round(self.chunks_per_s, 2),
            "embeddings_per_s": round(self.embeddings_per_s, 2),
            "paused": self.paused,
            "failed": [{"path": f.path, "reason": f.reason} for f in self.failed],
            "message": self.message,
        }
