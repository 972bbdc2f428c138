"""Indexing runs: scan a collection's sources, re-read what changed, drop what is gone, then embed.

A file is re-read when its size or modification time changed and its content hash did too; a file that
cannot be parsed is recorded as failed with the reason and the run goes on. Keyword search works as soon
as a file's chunks are written; vectors follow in a second phase that can be paused and cancelled.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.documents.chunking import DEFAULT_MAX_CHARS, chunk_sections
from engine.documents.embedding import Embedder, passage_text
from engine.documents.errors import DocumentParseError, IndexCancelled
from engine.documents.index import Collection, DocumentIndex
from engine.documents.parsing import document_kind, parse_file
from engine.documents.types import FileFailure, IndexProgress

log = logging.getLogger(__name__)

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache", "build", "dist"}
EMBED_BATCH = 16


@dataclass
class IndexControl:
    """Pause, resume and cancel for a run, from any thread."""

    _running: threading.Event = field(default_factory=threading.Event)
    _cancelled: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._running.set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def cancel(self) -> None:
        self._cancelled.set()
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def checkpoint(self, on_pause: Callable[[], object] | None = None) -> None:
        """Wait here while paused; raise IndexCancelled once cancelled."""
        if not self._running.is_set():
            if on_pause is not None:
                on_pause()
            self._running.wait()
        if self._cancelled.is_set():
            raise IndexCancelled()


@dataclass(frozen=True, slots=True)
class FileState:
    path: str
    mtime: float
    size: int


def scan_sources(sources: list[str]) -> tuple[dict[str, FileState], list[FileFailure]]:
    """Every indexable file under the sources (a named file is taken whatever its kind), and the sources that are
    missing or files that cannot be taken (a name that is not UTF-8). A link to a file outside its folder, or to a
    hidden one, is left out: indexing a folder reads what is in it."""
    found: dict[str, FileState] = {}
    missing: list[FileFailure] = []
    for source in sources:
        root = Path(source)
        if root.is_file():
            _add(found, missing, root)
        elif root.is_dir():
            inside = root.resolve()
            for path in _walk(root):
                if document_kind(path) is not None and _stays_inside(path, inside):
                    _add(found, missing, path)
        elif root.exists():
            missing.append(FileFailure(source, "it is not a file or a folder (a pipe or a device); remove it."))
        else:
            missing.append(FileFailure(source, "it no longer exists; remove it or put it back."))
    return found, missing


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS)
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def _stays_inside(path: Path, inside: Path) -> bool:
    """Whether ``path`` (found in the folder ``inside``) is a file of that folder: not a link to one elsewhere (the
    walk does not follow linked folders), or to a hidden one such as a key or a credentials file."""
    if not path.is_symlink():
        return True
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):  # a broken link, a loop
        return False
    return target.is_relative_to(inside) and not any(part.startswith(".") for part in target.relative_to(inside).parts)


def _add(found: dict[str, FileState], failed: list[FileFailure], path: Path) -> None:
    try:
        st = path.stat()
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:  # a pipe or a device never ends (or waits); empty: no text
        return
    key = str(path.resolve())
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are no UTF-8 in its name: it could not be stored, nor shown
        shown = os.fsencode(key).decode("utf-8", "replace")  # shown with U+FFFD for what is not UTF-8
        failed.append(FileFailure(shown, "its name is not valid UTF-8; rename it to index it."))
        return
    found[key] = FileState(key, st.st_mtime, st.st_size)


def _under(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or inside one."""
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def file_sha256(path: str) -> str:
    """The file's SHA-256.

    Raises:
        OSError: it cannot be read, or is no longer a regular file (a pipe put in its place would be waited on
            for ever: it is opened without waiting, and refused).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        digest = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Indexer:
    """Brings one collection's index up to date with its files.

    Args:
        index: The document index.
        embedder: Makes the vectors (None: keywords only; vectors wait for a run with an embedder).
        on_progress: Called with each IndexProgress (from the indexing thread).
        control: Pause/resume/cancel for the run.
        max_chars: Chunk size.
    """

    def __init__(
        self,
        index: DocumentIndex,
        embedder: Embedder | None = None,
        *,
        on_progress: Callable[[IndexProgress], None] | None = None,
        control: IndexControl | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.on_progress = on_progress
        self.control = control or IndexControl()
        self.max_chars = max_chars

    def run(self, name: str) -> IndexProgress:
        """Index collection ``name``: parse what changed, then embed what has no vector.

        Raises:
            CollectionNotFound: there is no such collection.
        """
        coll = self.index.get(name)
        started = time.monotonic()
        state = _RunState(name)
        try:
            self._emit(state, "scanning", started)
            self._sync_files(coll, state, started)
            coll = self.index.get(name)
            if self.embedder is not None:
                self._embed(coll, state, started, self.embedder)
            return self._emit(state, "done", started)
        except IndexCancelled:
            return self._emit(state, "cancelled", started, message="Indexing was cancelled; run it again to finish.")

    # -- phase 1: files -------------------------------------------------------------------------
    def _sync_files(self, coll: Collection, state: _RunState, started: float) -> None:
        found, missing = scan_sources(self.index.sources(coll))
        known = self.index.files(coll)
        # A source that is not there now (a drive unplugged, a share unmounted, a folder moved away for a moment)
        # keeps its files' passages until it is back, or removed from the collection: nothing is parsed again.
        away = [f.path for f in missing if not os.path.lexists(f.path)]
        for gone in sorted(set(known) - set(found)):
            if not _under(gone, away):
                self.index.remove_file(coll, gone)
        state.files_total = len(found)
        state.failed.extend(missing)
        self._emit(state, "parsing", started)  # how many there are, before the first (maybe slow) is read
        for path, fs in sorted(found.items()):
            self.control.checkpoint(lambda: self._emit(state, "parsing", started))
            record = known.get(path)
            if record is not None and record.mtime == fs.mtime and record.size == fs.size:
                if record.status == "failed":
                    state.failed.append(FileFailure(path, record.error or "it could not be read."))
                state.files_done += 1
                continue
            self._index_file(coll, fs, record, state, started)
            state.files_done += 1
            self._emit(state, "parsing", started)

    def _index_file(self, coll: Collection, fs: FileState, record, state: _RunState, started: float) -> None:
        def on_pause() -> None:
            self._emit(state, "parsing", started)

        try:
            sha = file_sha256(fs.path)
        except OSError as exc:
            reason = f"it cannot be opened ({exc.strerror or exc})."
            self.index.fail_file(coll, fs.path, mtime=fs.mtime, size=fs.size, reason=reason)
            state.failed.append(FileFailure(fs.path, reason))
            return
        if record is not None and record.sha256 == sha and record.status == "indexed":
            self.index.touch_file(record.id, fs.mtime, fs.size)  # touched, not changed
            return
        try:
            # checked between pages and blocks: a long file stops within moments of a cancel or pause
            control = self.control
            doc = parse_file(Path(fs.path), checkpoint=lambda: control.checkpoint(on_pause), paused=lambda: control.paused)
        except DocumentParseError as exc:
            self.index.fail_file(coll, fs.path, mtime=fs.mtime, size=fs.size, reason=exc.reason)
            state.failed.append(FileFailure(fs.path, exc.reason))
            return
        chunks = chunk_sections(doc.sections, max_chars=self.max_chars)
        self.index.write_file(
            coll, fs.path, mtime=fs.mtime, size=fs.size, sha256=sha, kind=doc.kind, title=doc.title,
            pages=doc.pages, chunks=chunks,
        )
        state.pages += doc.pages
        state.chunks += len(chunks)

    # -- phase 2: vectors ----------------------------------------------------------------------
    def _embed(self, coll: Collection, state: _RunState, started: float, embedder: Embedder) -> None:
        state.to_embed = self.index.count_pending(coll)
        embed_started = time.monotonic()
        self._emit(state, "embedding", started)
        while True:
            self.control.checkpoint(lambda: self._emit(state, "embedding", started))
            batch = self.index.pending(coll, EMBED_BATCH)
            if not batch:
                return
            vectors = embedder.embed([passage_text(text, heading, path) for _, text, heading, path in batch])
            coll = self.index.write_vectors(coll, [(row[0], vec) for row, vec in zip(batch, vectors, strict=True)])
            state.embedded += len(batch)
            state.embed_seconds = time.monotonic() - embed_started
            self._emit(state, "embedding", started)

    def _emit(self, state: _RunState, phase: str, started: float, message: str | None = None) -> IndexProgress:
        elapsed = max(1e-6, time.monotonic() - started)
        progress = IndexProgress(
            collection=state.name,
            phase=phase,
            files_done=state.files_done,
            files_total=state.files_total,
            chunks=state.chunks,
            embedded=state.embedded,
            to_embed=state.to_embed,
            files_per_s=state.files_done / elapsed,
            chunks_per_s=state.chunks / elapsed,
            embeddings_per_s=state.embedded / state.embed_seconds if state.embed_seconds else 0.0,
            paused=self.control.paused,
            failed=tuple(state.failed),
            message=message,
        )
        if self.on_progress is not None:
            try:
                self.on_progress(progress)
            except Exception:  # a progress display that fails never stops the run
                log.exception("progress callback failed")
        return progress


@dataclass
class _RunState:
    name: str
    files_done: int = 0
    files_total: int = 0
    pages: int = 0
    chunks: int = 0
    embedded: int = 0
    to_embed: int = 0
    embed_seconds: float = 0.0
    failed: list[FileFailure] = field(default_factory=list)
