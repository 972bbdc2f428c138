"""Watching collections' folders: a poll of sizes and modification times that starts a re-index on change.

Polling (every few seconds, only ``stat`` calls) works the same on every platform and file system,
network shares included, and the re-index it triggers is incremental anyway.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from engine.documents.index import DocumentIndex
from engine.documents.indexer import scan_sources

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 5.0


class FolderWatcher:
    """Calls ``on_change(name)`` when a collection's files change, appear or disappear.

    Args:
        index: The document index (its collections and their sources are read on every poll).
        on_change: Called from the watcher thread with the collection's name.
        interval: Seconds between polls.
    """

    def __init__(self, index: DocumentIndex, on_change: Callable[[str], None], *, interval: float = DEFAULT_INTERVAL):
        self.index = index
        self.on_change = on_change
        self.interval = interval
        self._snapshots: dict[str, frozenset] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            for name in self.index.names():
                self._snapshots[name] = self._snapshot(name)
            self._thread = threading.Thread(target=self._loop, name="docs-watcher", daemon=True)
            self._thread.start()

    def poll(self) -> list[str]:
        """One poll: the collections that changed since the last one (``on_change`` is called for each)."""
        changed = []
        names = self.index.names()
        for name in list(self._snapshots):
            if name not in names:
                del self._snapshots[name]
        for name in names:
            snap = self._snapshot(name)
            old = self._snapshots.get(name)
            self._snapshots[name] = snap
            if old is not None and old != snap:
                changed.append(name)
                try:
                    self.on_change(name)
                except Exception:
                    log.exception("re-indexing %s after a change failed to start", name)
        return changed

    def forget(self, name: str) -> None:
        """Take the current state of ``name`` as seen (after a run it started itself)."""
        self._snapshots[name] = self._snapshot(name)

    def _snapshot(self, name: str) -> frozenset:
        coll = self.index.find(name)
        if coll is None:
            return frozenset()
        found, missing = scan_sources(self.index.sources(coll))
        return frozenset((p, s.mtime, s.size) for p, s in found.items()) | frozenset(m.path for m in missing)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:
                log.exception("watching the document folders failed; trying again")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
