"""Nearest vectors from a collection's vectors held in memory, exact, in a millisecond or two.

sqlite-vec keeps the vectors and answers every KNN query exactly by a full scan; its PyPI builds have no
SIMD, so 10,000 vectors of 384 floats take about 10 ms a query on one core, and far longer when other
processes share it. The same scan as one numpy product over a matrix read once takes 1-2 ms.

The matrix of a collection is read from sqlite-vec on first use and kept while the collection's
``vectors_version`` (a random token every write of its vectors changes, in this process or another) is the
same. While vectors are being written (indexing, a change of model) searches use sqlite-vec itself, and the
matrix is read again once the collection has been quiet for :data:`QUIET_S`.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

# Seconds a collection must go without a write of its vectors before its matrix is read again.
QUIET_S = 2.0
# Memory the matrices of all collections may take together (about 170,000 vectors of 384 floats);
# a collection that does not fit is searched by sqlite-vec.
MAX_BYTES = 256 * 1024 * 1024


def new_version() -> int:
    """A fresh ``vectors_version`` token (random, so a collection made again under an old id differs)."""
    return secrets.randbits(62)


@dataclass(eq=False)
class _Matrix:
    version: int
    ids: np.ndarray  # [n] int64 chunk ids
    vectors: np.ndarray  # [n, dim] float32, each row unit length
    used: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.vectors.nbytes)


class VectorCache:
    """The in-memory matrices of a DocumentIndex's collections. Thread-safe.

    Args:
        max_bytes: Memory all matrices may take together.
        quiet_s: Seconds without writes before a changed collection's matrix is read again.
    """

    def __init__(self, *, max_bytes: int = MAX_BYTES, quiet_s: float = QUIET_S) -> None:
        self.max_bytes = max_bytes
        self.quiet_s = quiet_s
        self._matrices: dict[int, _Matrix] = {}
        self._busy_until: dict[int, float] = {}
        self._lock = threading.Lock()

    def changed(self, collection_id: int) -> None:
        """The collection's vectors were written (call it after the write's commit)."""
        with self._lock:
            self._matrices.pop(collection_id, None)
            self._busy_until[collection_id] = time.monotonic() + self.quiet_s

    def clear(self) -> None:
        with self._lock:
            self._matrices.clear()
            self._busy_until.clear()

    def load(self, conn, collection_id: int, table: str) -> bool:
        """Read the collection's matrix now (after its indexing finished), so the next search is fast;
        False when it is too big to hold."""
        return self._matrix(conn, collection_id, table, now_or_never=True) is not None

    def nearest(self, conn, collection_id: int, table: str, vector: Sequence[float], n: int) -> list[tuple[int, float]] | None:
        """The ``n`` chunk ids nearest ``vector`` with their cosine similarity, best first; None when the
        matrix cannot serve now (being written, or too big), and sqlite-vec should answer instead."""
        matrix = self._matrix(conn, collection_id, table)
        if matrix is None:
            return None
        query = np.asarray(vector, dtype=np.float32)
        if query.shape != (matrix.vectors.shape[1],):
            return None
        norm = float(np.linalg.norm(query))
        if norm > 0:
            query = query / norm
        sims = _dot_rows(matrix.vectors, query)
        n = min(n, len(sims))
        if n <= 0:
            return []
        top = np.argpartition(sims, len(sims) - n)[len(sims) - n :] if n < len(sims) else np.arange(len(sims))
        top = top[np.argsort(-sims[top], kind="stable")]
        return [(int(i), float(s)) for i, s in zip(matrix.ids[top], sims[top], strict=True)]

    # -- the matrices ---------------------------------------------------------------------------
    def _matrix(self, conn, collection_id: int, table: str, *, now_or_never: bool = False) -> _Matrix | None:
        version = _version(conn, collection_id)
        if version is None:
            return None
        now = time.monotonic()
        with self._lock:
            matrix = self._matrices.get(collection_id)
            if matrix is not None and matrix.version == version:
                matrix.used = now
                return matrix
            if now_or_never:
                self._matrices.pop(collection_id, None)
            elif now < self._busy_until.get(collection_id, 0.0):
                return None
            elif matrix is not None:  # written by another process since it was read: maybe still being written
                del self._matrices[collection_id]
                self._busy_until[collection_id] = now + self.quiet_s
                return None
            matrix = _read(conn, collection_id, table, self.max_bytes)
            if matrix is None:
                self._busy_until[collection_id] = now + 60.0  # too big: sqlite-vec serves it, asked again later
                return None
            self._make_room(matrix.nbytes)
            self._matrices[collection_id] = matrix
            log.debug("collection %d: %d vectors held in memory (%.1f MB)", collection_id, len(matrix.ids), matrix.nbytes / 1e6)
            return matrix

    def _make_room(self, needed: int) -> None:
        held = sum(m.nbytes for m in self._matrices.values())
        for cid, m in sorted(self._matrices.items(), key=lambda item: item[1].used):
            if held + needed <= self.max_bytes:
                break
            held -= m.nbytes
            del self._matrices[cid]


def _dot_rows(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``query``, on this thread: BLAS's matrix-vector product spreads over a
    thread per core and, on a machine busy with other work, waits for them (up to 20 times slower)."""
    vecdot = getattr(np, "vecdot", None)  # numpy 2: one dot product per row
    return vecdot(vectors, query) if vecdot is not None else np.einsum("ij,j->i", vectors, query)


def _version(conn, collection_id: int) -> int | None:
    row = conn.execute("SELECT vectors_version FROM collections WHERE id = ?", (collection_id,)).fetchone()
    return None if row is None else int(row[0])


def _read(conn, collection_id: int, table: str, max_bytes: int) -> _Matrix | None:
    """The collection's vectors and the version they are at, read in one snapshot."""
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        version = _version(conn, collection_id)
        dim = conn.execute("SELECT dim FROM collections WHERE id = ?", (collection_id,)).fetchone()
        count = conn.execute("SELECT COUNT(*) FROM chunks WHERE collection_id = ? AND embedded = 1", (collection_id,)).fetchone()
        if version is None or dim is None or dim[0] is None:
            return None
        if count[0] * (int(dim[0]) * 4 + 8) > max_bytes:
            return None
        rows = conn.execute(f"SELECT rowid, embedding FROM {table}").fetchall()
    finally:
        if own:
            conn.execute("COMMIT")
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), int(dim[0])).copy()
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return _Matrix(version=version, ids=ids, vectors=vectors)
