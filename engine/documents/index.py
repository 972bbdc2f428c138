"""The document index: collections, their sources and files, chunks with their keyword and vector rows.

One SQLite file beside the chats (``documents.db`` in Hearth's data folder). Every thread gets its own
connection; WAL lets searches read while an indexing run writes.
"""

from __future__ import annotations

import re
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from engine.documents import db
from engine.documents.errors import CollectionNotFound
from engine.documents.types import Chunk, CollectionInfo, FileFailure
from engine.documents.vectors import VectorCache, new_version

_NAME = re.compile(r"^[\w][\w .\-]{0,63}$")
_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for incremental
_RECLAIM_STEP_PAGES = 1024  # 4 MiB of 4 KiB pages: each step holds the write lock for a moment
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Collection:
    id: int
    name: str
    model: str
    dim: int | None
    shared: bool = False  # the admin shared it: chats made with an inference key may use it


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: int
    path: str
    mtime: float
    size: int
    sha256: str | None
    status: str
    error: str | None


def check_name(name: str) -> str:
    """A collection name as given, or a clear error.

    Raises:
        InvalidRequest: the name is empty, too long, or has characters other than letters, digits, space, . _ -.
    """
    from engine.errors import InvalidRequest

    name = (name or "").strip()
    if not _NAME.match(name):
        raise InvalidRequest(
            "A collection name is 1 to 64 letters, digits, spaces, dots, dashes or underscores; choose another.",
            param="name",
        )
    return name


def pack_vector(vec: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(vec)}f", *vec)


class DocumentIndex:
    """Collections and their chunks in one SQLite database.

    Args:
        path: The database file (created with its folder on first use).
        vectors: Holds collections' vectors in memory for searches (a default one if not given).
    """

    def __init__(self, path: Path, *, vectors: VectorCache | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list = []
        self._lock = threading.Lock()
        self.vectors = vectors or VectorCache()  # the collections' vectors in memory, for fast exact KNN
        self._aside: ThreadPoolExecutor | None = None
        self.conn  # noqa: B018 - make the schema now, so errors surface here

    @classmethod
    def default(cls) -> DocumentIndex:
        """The index in Hearth's data folder."""
        from engine.paths import hearth_home

        return cls(hearth_home() / db.DB_NAME)

    @property
    def conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = db.connect(self.path)
            with self._lock:
                self._all.append(conn)
        return conn

    def run_aside(self, fn: Callable[..., T], *args) -> Future[T]:
        """Run ``fn(*args)`` on a thread of the index's own while the caller goes on (a query's embedding
        while its keywords are ranked)."""
        with self._lock:
            if self._aside is None:
                self._aside = ThreadPoolExecutor(max_workers=4, thread_name_prefix="docs-query")
            return self._aside.submit(fn, *args)

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
            aside, self._aside = self._aside, None
        if aside is not None:
            aside.shutdown(wait=False, cancel_futures=True)
        for conn in conns:
            try:
                conn.close()
            except Exception:  # a connection of a thread that is gone
                pass
        self._local = threading.local()
        self.vectors.clear()

    # -- collections ------------------------------------------------------------------------------
    def create(self, name: str, model: str) -> Collection:
        name = check_name(name)
        conn = self.conn
        with _tx(conn):
            cur = conn.execute(
                "INSERT INTO collections (name, model, created, vectors_version) VALUES (?, ?, ?, ?)",
                (name, model, time.time(), new_version()),
            )
            if cur.lastrowid is None:
                raise RuntimeError(f"SQLite gave the new collection {name!r} no id")
            db.create_fts(conn, cur.lastrowid)
        return self.get(name)

    def get(self, name: str) -> Collection:
        row = self.conn.execute(
            "SELECT id, name, model, dim, shared FROM collections WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise CollectionNotFound(name)
        return Collection(*row[:4], shared=bool(row[4]))

    def find(self, name: str) -> Collection | None:
        try:
            return self.get(name)
        except CollectionNotFound:
            return None

    def names(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM collections ORDER BY name")]

    def delete(self, name: str) -> None:
        coll = self.get(name)
        conn = self.conn
        with _tx(conn):
            db.drop_tables(conn, coll.id)
            conn.execute("DELETE FROM chunks WHERE collection_id = ?", (coll.id,))
            conn.execute("DELETE FROM collections WHERE id = ?", (coll.id,))
            self.vectors.changed(coll.id)

    def reclaim(self, should_stop: Callable[[], bool] = lambda: False) -> int:
        """Give the space that deleted rows left in the database file back to the file system; the bytes freed.

        The free pages are dropped a few MiB at a time, each step a transaction of its own, so searches and
        other collections' indexing go on between steps; ``should_stop`` is asked before each. A database made
        before this was done is turned over once by a full VACUUM (its time is that of copying what it keeps).
        """
        conn = self.conn
        before = self._file_bytes()
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != _INCREMENTAL:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")
        else:
            while conn.execute("PRAGMA freelist_count").fetchone()[0] and not should_stop():
                # each row the pragma gives is a page moved; it stops early unless all are read
                conn.execute(f"PRAGMA incremental_vacuum({_RECLAIM_STEP_PAGES})").fetchall()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # the file is cut at a checkpoint
        return before - self._file_bytes()

    def _file_bytes(self) -> int:
        paths = [self.path, self.path.with_name(self.path.name + "-wal")]
        return sum(p.stat().st_size for p in paths if p.exists())

    def set_model(self, name: str, model: str) -> Collection:
        """Give ``name`` another embedding model: its vectors are dropped, to be made again."""
        coll = self.get(name)
        conn = self.conn
        with _tx(conn):
            conn.execute(f"DROP TABLE IF EXISTS {db.vec_table(coll.id)}")
            conn.execute("UPDATE collections SET model = ?, dim = NULL WHERE id = ?", (model, coll.id))
            conn.execute("UPDATE chunks SET embedded = 0 WHERE collection_id = ?", (coll.id,))
            self._vectors_written(coll)
        return self.get(name)

    def set_shared(self, name: str, shared: bool) -> Collection:
        """Share ``name`` with the inference keys (chats may name it), or stop sharing it."""
        coll = self.get(name)
        self.conn.execute("UPDATE collections SET shared = ? WHERE id = ?", (int(shared), coll.id))
        return self.get(name)

    def add_sources(self, name: str, paths: Iterable[Path]) -> list[str]:
        coll = self.get(name)
        added = []
        conn = self.conn
        with _tx(conn):
            for p in paths:
                text = str(Path(p).expanduser().resolve())
                cur = conn.execute("INSERT OR IGNORE INTO sources VALUES (?, ?)", (coll.id, text))
                if cur.rowcount:
                    added.append(text)
        return added

    def remove_source(self, name: str, path: Path) -> bool:
        coll = self.get(name)
        text = str(Path(path).expanduser().resolve())
        cur = self.conn.execute("DELETE FROM sources WHERE collection_id = ? AND path = ?", (coll.id, text))
        return bool(cur.rowcount)

    def sources(self, coll: Collection) -> list[str]:
        rows = self.conn.execute("SELECT path FROM sources WHERE collection_id = ? ORDER BY path", (coll.id,))
        return [r[0] for r in rows]

    def info(self, name: str) -> CollectionInfo:
        coll = self.get(name)
        conn = self.conn
        files = conn.execute(
            "SELECT COUNT(*) FROM files WHERE collection_id = ? AND status = 'indexed'", (coll.id,)
        ).fetchone()[0]
        chunks, embedded = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(embedded), 0) FROM chunks WHERE collection_id = ?", (coll.id,)
        ).fetchone()
        return CollectionInfo(
            name=coll.name,
            model=coll.model,
            shared=coll.shared,
            sources=tuple(self.sources(coll)),
            files=files,
            chunks=chunks,
            embedded=int(embedded),
            failed=tuple(self.failures(coll)),
        )

    def failures(self, coll: Collection) -> list[FileFailure]:
        rows = self.conn.execute(
            "SELECT path, error FROM files WHERE collection_id = ? AND status = 'failed' ORDER BY path", (coll.id,)
        )
        return [FileFailure(path, error or "it could not be read.") for path, error in rows]

    # -- files --------------------------------------------------------------------------------
    def files(self, coll: Collection) -> dict[str, FileRecord]:
        rows = self.conn.execute(
            "SELECT id, path, mtime, size, sha256, status, error FROM files WHERE collection_id = ?", (coll.id,)
        )
        return {r[1]: FileRecord(*r) for r in rows}

    def touch_file(self, file_id: int, mtime: float, size: int) -> None:
        self.conn.execute("UPDATE files SET mtime = ?, size = ? WHERE id = ?", (mtime, size, file_id))

    def remove_file(self, coll: Collection, path: str) -> None:
        conn = self.conn
        with _tx(conn):
            self._drop_chunks(coll, path)
            conn.execute("DELETE FROM files WHERE collection_id = ? AND path = ?", (coll.id, path))

    def _drop_chunks(self, coll: Collection, path: str) -> None:
        conn = self.conn
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.collection_id = ? AND f.path = ?",
                (coll.id, path),
            )
        ]
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        conn.execute(f"DELETE FROM {db.fts_table(coll.id)} WHERE rowid IN ({marks})", ids)
        if db.has_table(conn, db.vec_table(coll.id)):
            conn.execute(f"DELETE FROM {db.vec_table(coll.id)} WHERE rowid IN ({marks})", ids)
            self._vectors_written(coll)
        conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", ids)

    def write_file(
        self,
        coll: Collection,
        path: str,
        *,
        mtime: float,
        size: int,
        sha256: str,
        kind: str,
        title: str | None,
        pages: int,
        chunks: Sequence[Chunk],
    ) -> int:
        """Replace ``path``'s chunks with ``chunks`` (keyword rows at once; vectors later)."""
        conn = self.conn
        name = Path(path).name
        with _tx(conn):
            self._drop_chunks(coll, path)
            conn.execute(
                "INSERT INTO files (collection_id, path, kind, title, mtime, size, sha256, pages, chars, status, error,"
                " indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'indexed', NULL, ?)"
                " ON CONFLICT (collection_id, path) DO UPDATE SET kind = excluded.kind, title = excluded.title,"
                " mtime = excluded.mtime, size = excluded.size, sha256 = excluded.sha256, pages = excluded.pages,"
                " chars = excluded.chars, status = 'indexed', error = NULL, indexed_at = excluded.indexed_at",
                (coll.id, path, kind, title, mtime, size, sha256, pages, sum(len(c.text) for c in chunks), time.time()),
            )
            file_id = conn.execute(
                "SELECT id FROM files WHERE collection_id = ? AND path = ?", (coll.id, path)
            ).fetchone()[0]
            fts = db.fts_table(coll.id)
            for chunk in chunks:
                cur = conn.execute(
                    "INSERT INTO chunks (file_id, collection_id, ordinal, page, heading, text) VALUES (?, ?, ?, ?, ?, ?)",
                    (file_id, coll.id, chunk.ordinal, chunk.page, chunk.heading, chunk.text),
                )
                conn.execute(
                    f"INSERT INTO {fts} (rowid, text, heading, name) VALUES (?, ?, ?, ?)",
                    (cur.lastrowid, chunk.text, chunk.heading or "", f"{name} {title or ''}"),
                )
        return file_id

    def fail_file(self, coll: Collection, path: str, *, mtime: float, size: int, reason: str) -> None:
        conn = self.conn
        with _tx(conn):
            self._drop_chunks(coll, path)
            conn.execute(
                "INSERT INTO files (collection_id, path, mtime, size, status, error, indexed_at)"
                " VALUES (?, ?, ?, ?, 'failed', ?, ?) ON CONFLICT (collection_id, path) DO UPDATE SET"
                " mtime = excluded.mtime, size = excluded.size, sha256 = NULL, status = 'failed',"
                " error = excluded.error, indexed_at = excluded.indexed_at",
                (coll.id, path, mtime, size, reason, time.time()),
            )

    # -- vectors --------------------------------------------------------------------------------
    def pending(self, coll: Collection, limit: int) -> list[tuple[int, str, str | None, str]]:
        """Chunks still without a vector: (id, text, heading, file path)."""
        rows = self.conn.execute(
            "SELECT c.id, c.text, c.heading, f.path FROM chunks c JOIN files f ON f.id = c.file_id"
            " WHERE c.collection_id = ? AND c.embedded = 0 ORDER BY c.id LIMIT ?",
            (coll.id, limit),
        )
        return list(rows)

    def count_pending(self, coll: Collection) -> int:
        return self.conn.execute(
            "SELECT COUNT(*) FROM chunks WHERE collection_id = ? AND embedded = 0", (coll.id,)
        ).fetchone()[0]

    def write_vectors(self, coll: Collection, rows: Sequence[tuple[int, Sequence[float]]]) -> Collection:
        """Store vectors for chunk ids; the first ones fix the collection's dimension."""
        if not rows:
            return coll
        conn = self.conn
        dim = len(rows[0][1])
        with _tx(conn):
            if coll.dim is None:
                conn.execute("UPDATE collections SET dim = ? WHERE id = ?", (dim, coll.id))
                coll = Collection(coll.id, coll.name, coll.model, dim, coll.shared)
            db.create_vec(conn, coll.id, coll.dim or dim)
            table = db.vec_table(coll.id)
            for chunk_id, vec in rows:
                # a chunk replaced while it was being embedded is gone: its vector is dropped with it
                if conn.execute("SELECT 1 FROM chunks WHERE id = ?", (chunk_id,)).fetchone() is None:
                    continue
                conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (chunk_id,))
                conn.execute(f"INSERT INTO {table} (rowid, embedding) VALUES (?, ?)", (chunk_id, pack_vector(vec)))
                conn.execute("UPDATE chunks SET embedded = 1 WHERE id = ?", (chunk_id,))
            self._vectors_written(coll)
        return coll

    def _vectors_written(self, coll: Collection) -> None:
        """Within the transaction that writes ``coll``'s vectors: a new version token, so that every
        process's matrix of them is read again (engine.documents.vectors)."""
        self.conn.execute("UPDATE collections SET vectors_version = ? WHERE id = ?", (new_version(), coll.id))
        self.vectors.changed(coll.id)

    def warm_vectors(self, coll: Collection) -> bool:
        """Hold ``coll``'s vectors in memory now (an indexing run just finished), so searches are fast at
        once; False when it has none or they are too many to hold."""
        if coll.dim is None or not db.has_table(self.conn, db.vec_table(coll.id)):
            return False
        return self.vectors.load(self.conn, coll.id, db.vec_table(coll.id))

    def total_chars(self, coll: Collection) -> int:
        """Characters of text in the collection's indexed files."""
        return self.conn.execute(
            "SELECT COALESCE(SUM(chars), 0) FROM files WHERE collection_id = ? AND status = 'indexed'", (coll.id,)
        ).fetchone()[0]

    def documents(self, coll: Collection) -> list[tuple[str, int, int]]:
        """Indexed files: (path, chunks, characters)."""
        rows = self.conn.execute(
            "SELECT f.path, COUNT(c.id), f.chars FROM files f LEFT JOIN chunks c ON c.file_id = f.id"
            " WHERE f.collection_id = ? AND f.status = 'indexed' GROUP BY f.id ORDER BY f.path",
            (coll.id,),
        )
        return list(rows)

    def file_chunks(self, coll: Collection, path: str) -> list[tuple[int, str, int | None, str | None]]:
        """A file's chunks in reading order: (id, text, page, heading)."""
        rows = self.conn.execute(
            "SELECT c.id, c.text, c.page, c.heading FROM chunks c JOIN files f ON f.id = c.file_id"
            " WHERE f.collection_id = ? AND f.path = ? ORDER BY c.ordinal",
            (coll.id, path),
        )
        return list(rows)


class _tx:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        return False
