"""Collections as a service: indexing jobs in the background (with progress, pause and cancel), the
folder watcher, searches across collections and the context for a chat. The worker's /api/docs routes
and the CLI both use it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from engine.documents.embedding import Embedder
from engine.documents.errors import CollectionNotFound
from engine.documents.index import DocumentIndex
from engine.documents.indexer import IndexControl, Indexer
from engine.documents.minilm import DEFAULT_MODEL
from engine.documents.prompt import DocsContext, TokenCounter, approx_tokens, build_context
from engine.documents.search import fuse, search
from engine.documents.types import CollectionInfo, IndexProgress, SearchHit
from engine.documents.watcher import FolderWatcher
from engine.errors import HearthError, InvalidRequest
from engine.paths import path_exists, user_path

log = logging.getLogger(__name__)

EmbedderFactory = Callable[[str], Embedder]


class IndexJob:
    """One collection's indexing in a thread of its own; a change noticed meanwhile runs it once more."""

    def __init__(self, service: DocumentService, name: str) -> None:
        self.service = service
        self.name = name
        self.control = IndexControl()
        self.progress = IndexProgress(collection=name, phase="queued")
        self._again = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"docs-index-{name}", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def again(self) -> None:
        self._again.set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _report(self, progress: IndexProgress) -> None:
        self.progress = progress

    def _run(self) -> None:
        while True:
            self._again.clear()
            try:
                coll = self.service.index.get(self.name)
                problem = None
                try:
                    embedder = self.service.embedder(coll.model)
                except HearthError as exc:  # keywords are indexed all the same
                    embedder, problem = None, exc
                indexer = Indexer(self.service.index, embedder, on_progress=self._report, control=self.control)
                self.progress = indexer.run(self.name)
                if self.progress.phase == "done":  # searches are fast from the first one
                    self.service.index.warm_vectors(self.service.index.get(self.name))
                if problem is not None:
                    self.progress = replace(
                        self.progress, phase="failed", message=f"Keyword search works, but no embeddings: {problem}"
                    )
                    return
            except CollectionNotFound:
                self.progress = IndexProgress(collection=self.name, phase="cancelled", message="The collection was removed.")
                return
            except Exception as exc:
                log.exception("indexing %s failed", self.name)
                self.progress = IndexProgress(
                    collection=self.name,
                    phase="failed",
                    files_done=self.progress.files_done,
                    files_total=self.progress.files_total,
                    chunks=self.progress.chunks,
                    embedded=self.progress.embedded,
                    failed=self.progress.failed,
                    message=f"Indexing stopped: {exc}",
                )
                return
            finally:
                if self.service.watcher is not None:
                    self.service.watcher.forget(self.name)
            if self.control.cancelled or not self._again.is_set():
                return


class DocumentService:
    """Collections, their indexing jobs, and retrieval.

    Args:
        index: The document index.
        embedder_factory: Makes the embedder for a model name (the worker's goes through its model manager).
        watch: Poll the collections' folders and re-index on change.
        watch_interval: Seconds between polls.
    """

    def __init__(
        self,
        index: DocumentIndex,
        embedder_factory: EmbedderFactory | None,
        *,
        watch: bool = True,
        watch_interval: float = 5.0,
    ) -> None:
        self.index = index
        self._factory = embedder_factory
        self._embedders: dict[str, Embedder] = {}
        self._jobs: dict[str, IndexJob] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._reclaiming: Future[int] | None = None
        self.watcher = FolderWatcher(index, self.on_change, interval=watch_interval) if watch else None
        if self.watcher is not None:
            self.watcher.start()
            self._resume()

    def _resume(self) -> None:
        """Go on with the collections a stopped worker left half indexed: passages still without vectors, or
        sources with no file read yet (it was stopped while reading them)."""
        for name in self.index.names():
            try:
                coll = self.index.get(name)
                if self.index.count_pending(coll) or (self.index.sources(coll) and not self.index.files(coll)):
                    log.info("collection %s was left half indexed; indexing it again", name)
                    self.start(name)
            except Exception:  # one collection's trouble leaves the others to go on
                log.exception("could not resume indexing %s", name)

    def embedder(self, model: str) -> Embedder | None:
        if self._factory is None:
            return None
        with self._lock:
            embedder = self._embedders.get(model)
            if embedder is None:
                embedder = self._embedders[model] = self._factory(model)
            return embedder

    # -- collections ----------------------------------------------------------------------------
    def add(
        self, name: str, paths: Sequence[str | Path], *, model: str | None = None, shared: bool | None = None
    ) -> CollectionInfo:
        """Create ``name`` if needed, add ``paths`` to it and start indexing (``shared``: share it with the
        inference keys, or stop; None leaves it as it is, unshared when new).

        Raises:
            InvalidRequest: no path given, a path does not exist, or the name is not valid.
        """
        if not paths:
            raise InvalidRequest("Give at least one file or folder to add.", param="paths")
        resolved = [user_path(str(p), param="paths") for p in paths]
        missing = [str(p) for p in resolved if not path_exists(p, param="paths")]
        if missing:
            raise InvalidRequest(f"{missing[0]} does not exist; check the path.", param="paths")
        coll = self.index.find(name.strip()) if name else None
        if coll is None:
            coll = self.index.create(name, model or DEFAULT_MODEL)
        elif model and model != coll.model:
            self.index.set_model(coll.name, model)
        self.index.add_sources(coll.name, resolved)
        if shared is not None:
            self.index.set_shared(coll.name, shared)
        self.start(coll.name)
        return self.index.info(coll.name)

    def infos(self) -> list[CollectionInfo]:
        return [self.index.info(n) for n in self.index.names()]

    def remove(self, name: str) -> None:
        self.index.get(name)
        job = self._jobs.pop(name, None)
        if job is not None:
            job.control.cancel()
            job.join(30)
        self.index.delete(name)
        # its space goes back to the disk in the background: the removal answers at once, and the file is cut a
        # few MiB at a time while searches and other collections' indexing go on
        self._reclaiming = self.index.run_aside(self._reclaim_space)

    def _reclaim_space(self) -> int:
        try:
            return self.index.reclaim(self._closing.is_set)
        except Exception:  # the collection is gone all the same; the space is taken back after the next removal
            log.exception("could not give the space of a removed collection back to the disk")
            return 0

    def wait_reclaimed(self, timeout: float | None = None) -> int:
        """Wait for the space of the last removed collection to be given back; the bytes freed (0 if none).

        Raises:
            TimeoutError: it took longer than ``timeout`` seconds.
        """
        reclaiming = self._reclaiming
        return reclaiming.result(timeout) if reclaiming is not None else 0

    def set_model(self, name: str, model: str) -> CollectionInfo:
        """Use ``model`` for ``name``'s vectors: they are made again from the start."""
        job = self._jobs.get(name)
        if job is not None and job.running:
            job.control.cancel()
            job.join(30)
        self.index.set_model(name, model)
        self.start(name)
        return self.index.info(name)

    def set_shared(self, name: str, shared: bool) -> CollectionInfo:
        """Share ``name`` with the inference keys (chats made with one may name it), or stop sharing it.

        Raises:
            CollectionNotFound: there is no such collection.
        """
        self.index.set_shared(name, shared)
        return self.index.info(name)

    # -- jobs -----------------------------------------------------------------------------------
    def start(self, name: str) -> IndexJob:
        self.index.get(name)
        with self._lock:
            job = self._jobs.get(name)
            if job is not None and job.running:
                if job.control.paused:
                    job.control.resume()
                job.again()
                return job
            job = self._jobs[name] = IndexJob(self, name)
            return job

    def on_change(self, name: str) -> None:
        log.info("files of collection %s changed; re-indexing", name)
        self.start(name)

    def job(self, name: str) -> IndexJob | None:
        return self._jobs.get(name)

    def progress(self, name: str) -> IndexProgress | None:
        job = self._jobs.get(name)
        return job.progress if job is not None else None

    def control(self, name: str, action: str) -> IndexProgress:
        """Pause, resume or cancel ``name``'s indexing.

        Raises:
            InvalidRequest: nothing is indexing, or the action is unknown.
        """
        self.index.get(name)
        job = self._jobs.get(name)
        if job is None or not job.running:
            raise InvalidRequest(f"Collection '{name}' is not being indexed now.", param="action")
        if action == "pause":
            job.control.pause()
        elif action == "resume":
            job.control.resume()
        elif action == "cancel":
            job.control.cancel()
        else:
            raise InvalidRequest("The action is pause, resume or cancel.", param="action")
        return replace(job.progress, paused=job.control.paused)

    def wait(self, name: str, timeout: float | None = None) -> IndexProgress | None:
        job = self._jobs.get(name)
        if job is None:
            return None
        job.join(timeout)
        return job.progress

    # -- retrieval ------------------------------------------------------------------------------
    def search(
        self, names: Sequence[str], query: str, *, k: int = 5, mode: str = "auto"
    ) -> tuple[list[SearchHit], dict[str, str]]:
        """The best ``k`` passages across collections and the mode each was searched in.

        Raises:
            CollectionNotFound, InvalidRequest.
        """
        if not query or not query.strip():
            raise InvalidRequest("The query is empty; type what to look for.", param="query")
        if not 1 <= k <= 100:
            raise InvalidRequest("k is between 1 and 100.", param="k")
        rankings, modes = [], {}
        vectors: dict[str, list[float]] = {}  # the query embedded once per model, however many collections
        for name in names:
            coll = self.index.get(name)
            embedder = self._query_embedder(coll.model, vectors) if mode != "keyword" else None
            hits, used = search(self.index, coll, query, k=k, embed_query=embedder, mode=mode)
            rankings.append(hits)
            modes[name] = used
        if len(rankings) == 1:
            return rankings[0], modes
        return fuse(rankings, k), modes

    def _query_embedder(self, model: str, vectors: dict[str, list[float]]):
        if self._factory is None:
            return None

        def embed(text: str) -> list[float]:
            if model in vectors:
                return vectors[model]
            # loaded on first use: a keyword-only search never loads the embedding model
            embedder = self.embedder(model)
            if embedder is None:
                raise RuntimeError("the document service has no embedding model")
            vectors[model] = vector = embedder.embed([text])[0]
            return vector

        return embed

    def context(
        self,
        names: Sequence[str],
        question: str,
        *,
        budget_tokens: int = 1500,
        k: int = 8,
        count_tokens: TokenCounter = approx_tokens,
        mode: str = "auto",
    ) -> DocsContext:
        """The system message for answering ``question`` from ``names``: the whole documents when they
        fit the budget together, else the best passages that fit.

        Raises:
            CollectionNotFound, InvalidRequest.
        """
        whole = self._whole_documents(names, budget_tokens, count_tokens)
        if whole is not None:
            return build_context(whole, budget_tokens=budget_tokens, count_tokens=count_tokens, whole_documents=True)
        hits, _ = self.search(names, question, k=k, mode=mode)
        return build_context(hits, budget_tokens=budget_tokens, count_tokens=count_tokens)

    def _whole_documents(self, names, budget_tokens: int, count_tokens: TokenCounter) -> list[SearchHit] | None:
        colls = [self.index.get(name) for name in names]
        # four characters a token, and room for the markers and the question
        if sum(self.index.total_chars(coll) for coll in colls) // 4 > budget_tokens * 0.8:
            return None  # decided from the files' sizes, before reading any of their chunks
        passages: list[SearchHit] = []
        for coll in colls:
            for path, _, _ in self.index.documents(coll):
                for cid, text, page, heading in self.index.file_chunks(coll, path):
                    passages.append(SearchHit(cid, text, path, page, heading, score=0.0))
        if not passages:
            return None
        used = sum(count_tokens(p.text) + 12 for p in passages)
        return passages if used <= budget_tokens * 0.9 else None

    def close(self) -> None:
        self._closing.set()
        if self._reclaiming is not None:  # it stops at its next step, before the connections close under it
            self._reclaiming.result()
        if self.watcher is not None:
            self.watcher.close()
        for job in list(self._jobs.values()):
            job.control.cancel()
            job.join(30)
        for embedder in self._embedders.values():
            close = getattr(embedder, "close", None)
            if close is not None:
                close()
        self._embedders.clear()
        self.index.close()
