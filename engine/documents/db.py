"""The documents database: SQLite with FTS5 for keywords and sqlite-vec for vectors.

Python's own sqlite3 is often built without extension loading (pyenv's and macOS's are), so the
connection comes from sqlean.py, which bundles a current SQLite that can load sqlite-vec, when the
standard module cannot.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from types import ModuleType

from engine.paths import private_file

log = logging.getLogger(__name__)

DB_NAME = "documents.db"
SCHEMA_VERSION = 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    dim INTEGER,
    created REAL NOT NULL,
    vectors_version INTEGER NOT NULL DEFAULT 0,
    shared INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS sources (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    PRIMARY KEY (collection_id, path)
);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    kind TEXT,
    title TEXT,
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT,
    pages INTEGER NOT NULL DEFAULT 0,
    chars INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    error TEXT,
    indexed_at REAL NOT NULL,
    UNIQUE (collection_id, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    collection_id INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    page INTEGER,
    heading TEXT,
    text TEXT NOT NULL,
    embedded INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS chunks_by_file ON chunks(file_id);
CREATE INDEX IF NOT EXISTS chunks_pending ON chunks(collection_id, embedded);
"""


def _module() -> ModuleType:
    """The sqlite3 module to use: the standard one if it can load extensions, else sqlean.py's."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    import sqlean

    return sqlean


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the documents database at ``path`` with sqlite-vec loaded and the schema made."""
    import sqlite_vec

    module = _module()
    if str(path) != ":memory:":
        private_file(path)
    conn = module.connect(str(path), timeout=30.0, check_same_thread=False, isolation_level=None)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    # before the first table, so a new database can give the space of a deleted collection back (an older one
    # is turned over by the first DocumentIndex.reclaim)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.executescript(SCHEMA)
    if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
        _upgrade(conn)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return conn


# Columns added since the first schema, with the version that added them: an older database gets them.
_ADDED_COLUMNS = (
    ("vectors_version", "INTEGER NOT NULL DEFAULT 0"),  # 2: a token every write of vectors changes
    ("shared", "INTEGER NOT NULL DEFAULT 0"),  # 3: the admin shared it with the inference keys
)


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring a database an older Hearth made to the current schema (its rows are kept)."""
    for column, kind in _ADDED_COLUMNS:
        if column in _columns(conn, "collections"):
            continue
        try:
            conn.execute(f"ALTER TABLE collections ADD COLUMN {column} {kind}")
        except Exception:  # sqlite3's or sqlean's error: fine if another connection added it meanwhile
            if column not in _columns(conn, "collections"):
                raise


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def fts_table(collection_id: int) -> str:
    return f"fts_{int(collection_id)}"


def vec_table(collection_id: int) -> str:
    return f"vec_{int(collection_id)}"


def create_fts(conn: sqlite3.Connection, collection_id: int) -> None:
    # porter stemming over unicode61: "indexing" finds "indexed"; the rowid is the chunk's id
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts_table(collection_id)} "
        "USING fts5(text, heading, name, tokenize='porter unicode61 remove_diacritics 2')"
    )


def create_vec(conn: sqlite3.Connection, collection_id: int, dim: int) -> None:
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {vec_table(collection_id)} "
        f"USING vec0(embedding float[{int(dim)}] distance_metric=cosine)"
    )


def drop_tables(conn: sqlite3.Connection, collection_id: int) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {fts_table(collection_id)}")
    conn.execute(f"DROP TABLE IF EXISTS {vec_table(collection_id)}")


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return row is not None
