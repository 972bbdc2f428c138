"""Vector search from the vectors held in memory: the same passages as sqlite-vec's own scan, and never a
stale answer after a file changes, whether this process or another one (the CLI beside the worker) wrote
the vectors. Random vectors: what is tested is where they are looked up, not what they mean."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engine.documents import DocumentIndex
from engine.documents.search import search, vector_search
from engine.documents.types import Chunk
from engine.documents.vectors import VectorCache

DIM = 16


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _add_file(index: DocumentIndex, name: str, texts: list[str], vectors: np.ndarray) -> None:
    coll = index.get("notes")
    chunks = [Chunk(text=t, ordinal=i, heading=f"{name} {i}") for i, t in enumerate(texts)]
    index.write_file(coll, f"/notes/{name}.md", mtime=0.0, size=1, sha256=name, kind="markdown", title=None,
                     pages=0, chunks=chunks)
    pending = index.pending(coll, 10_000)
    ids = [row[0] for row in pending if row[3] == f"/notes/{name}.md"]
    index.write_vectors(coll, list(zip(ids, vectors.tolist(), strict=True)))


@pytest.fixture
def notes(tmp_path: Path) -> tuple[DocumentIndex, np.ndarray]:
    rng = np.random.default_rng(7)
    index = DocumentIndex(tmp_path / "documents.db", vectors=VectorCache(quiet_s=0.0))
    index.create("notes", "test-model")
    vectors = _unit(rng, 300)
    for f in range(3):
        _add_file(index, f"file{f}", [f"note tag{f}x{i} about canals and bridges" for i in range(100)],
                  vectors[f * 100 : (f + 1) * 100])
    yield index, vectors
    index.close()


def test_vectors_held_in_memory_find_what_sqlite_vec_finds(notes, tmp_path: Path):
    index, vectors = notes
    coll = index.get("notes")
    assert index.warm_vectors(coll)
    scan = DocumentIndex(tmp_path / "documents.db", vectors=VectorCache(max_bytes=0))  # sqlite-vec every time
    try:
        rng = np.random.default_rng(1)
        for query in [*vectors[[5, 150, 299]], *_unit(rng, 5)]:
            held = vector_search(index, coll, query.tolist(), 10)
            scanned = vector_search(scan, coll, query.tolist(), 10)
            assert [h.chunk_id for h in held] == [h.chunk_id for h in scanned]
            assert [h.vector_score for h in held] == pytest.approx([h.vector_score for h in scanned], abs=1e-5)
        hits, mode = search(index, coll, "tag1x50 canals", k=5, embed_query=lambda _q: vectors[150].tolist())
        assert mode == "hybrid" and hits[0].heading == "file1 50"
        assert (hits[0].keyword_rank, hits[0].vector_rank) == (1, 1) and len(hits) == 5
        assert index.vectors.nearest(index.conn, coll.id, f"vec_{coll.id}", vectors[5].tolist(), 1) is not None
    finally:
        scan.close()


def test_a_file_changed_after_the_vectors_were_read_is_never_answered_from_old_ones(notes):
    index, vectors = notes
    coll = index.get("notes")
    assert index.warm_vectors(coll)
    target = vectors[42].tolist()
    assert vector_search(index, coll, target, 1)[0].heading == "file0 42"
    index.remove_file(coll, "/notes/file0.md")  # the best match goes
    assert all(h.heading and not h.heading.startswith("file0") for h in vector_search(index, coll, target, 5))
    _add_file(index, "file9", ["a new note"], np.array([target], dtype=np.float32))  # and comes back elsewhere
    assert vector_search(index, coll, target, 1)[0].heading == "file9 0"


def test_vectors_written_by_another_process_are_seen(notes, tmp_path: Path):
    index, vectors = notes
    coll = index.get("notes")
    assert index.warm_vectors(coll)
    other = DocumentIndex(tmp_path / "documents.db")  # `hearth docs add` while the worker serves
    try:
        target = _unit(np.random.default_rng(3), 1)
        _add_file(other, "elsewhere", ["written by the CLI"], target)
    finally:
        other.close()
    assert vector_search(index, coll, target[0].tolist(), 1)[0].heading == "elsewhere 0"


def test_a_documents_database_from_before_is_upgraded_with_its_collections(tmp_path: Path):
    path = tmp_path / "documents.db"
    index = DocumentIndex(path)
    index.create("old", "test-model")
    index.close()
    # the collections table as the first release made it
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE c2 AS SELECT id, name, model, dim, created FROM collections;"
        "DROP TABLE collections; ALTER TABLE c2 RENAME TO collections; PRAGMA user_version=1;"
    )
    conn.close()
    index = DocumentIndex(path)
    try:
        assert index.names() == ["old"]
        assert index.conn.execute("SELECT vectors_version FROM collections").fetchone() == (0,)
        assert index.conn.execute("PRAGMA user_version").fetchone()[0] >= 3
        assert index.get("old").shared is False  # a collection from before is the admin's alone
        assert index.set_shared("old", True).shared is True and index.info("old").shared is True
    finally:
        index.close()
    index = DocumentIndex(path)  # the flag is kept with the collection
    try:
        assert index.get("old").shared is True
    finally:
        index.close()
