"""Downloads from the hub that can be paused, resumed (also after a crash) and cancelled.

Python API, shared by ``hearth pull``, the server's admin endpoints and the app::

    manager = DownloadManager(registry)                  # one per process; close() when done
    job = manager.start("TheOrg/Model-GGUF", "Q4_K_M", on_event=callback)   # -> DownloadJob
    job.status()       # -> DownloadStatus snapshot (also what every event callback receives)
    job.pause(); job.resume(); job.cancel()
    job.wait(timeout)  # blocks until completed, failed, cancelled or paused; returns the status
    manager.jobs(), manager.status(), manager.get(job_id), manager.find(repo, variant)
    manager.pause(job_id), manager.resume(job_id), manager.cancel(job_id), manager.forget(job_id)
    manager.subscribe(callback) -> unsubscribe   # events of every job
    manager.resume_interrupted()  # jobs that were running when the last process died or closed
    manager.close()               # pauses running jobs, keeping them for resume_interrupted()

``start`` raises at once (nothing is created) for a hub error (:class:`engine.errors.HubError` and
its subclasses, :class:`UnsafeHubPath` among them: a listing that names a file outside the models folder), an unknown variant (:class:`InvalidRequest`), or too little disk
(:class:`InsufficientDiskSpace`). Failures during the transfer end the job in state ``failed``
with ``status().error`` set to one sentence; ``resume()`` retries from what is on disk.

Events: callbacks get a frozen :class:`DownloadStatus` on every state change and at most every
``progress_interval`` seconds while bytes arrive; they run on the download's thread and must
return quickly. ``status.to_dict()`` is ``{id, repo, variant, name, format, state, bytes_done,
bytes_total, speed, eta, current_file, files_done, files_total, error, model}`` with ``state`` one
of ``queued running paused completed failed cancelled``, ``speed`` in bytes/s, ``eta`` in seconds
(or None), and ``model`` the registered name once completed.

How it works: files go into ``<models>/.partial/<job id>/...part`` (never taken for models),
fetched with HTTP Range from where they stopped, hashed while they arrive and checked against the
hub's LFS sha256 (or git blob sha1 for small files). A file that does not match is deleted and
the download fails; nothing is registered. When every file is verified they move into
``<models>/<owner>/<repo>/`` and the model is registered as ``REPO:VARIANT`` (source ``hub``).
Free disk space is checked before anything starts. State lives in the registry's SQLite database.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from engine.catalog.download_job import PART_SUFFIX, DownloadJob, DownloadState, DownloadStatus, Listener
from engine.catalog.download_store import DownloadPlan, DownloadStore, StoredDownload
from engine.catalog.hub import HubClient, RepoListing
from engine.catalog.hub_paths import inside
from engine.catalog.registry import LocalModel, ModelRegistry
from engine.catalog.transfer import FileFetcher, ProcessLock, Stopped
from engine.catalog.variants import is_projector
from engine.errors import DownloadError, HearthError, InsufficientDiskSpace, InvalidRequest

log = logging.getLogger(__name__)

PARTIAL_DIR = ".partial"
DEFAULT_DISK_MARGIN = 100_000_000  # bytes left free beyond the download itself
DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DownloadManager:
    """Runs downloads on threads, several at once, and keeps their state in the registry database.

    Args:
        registry: Where finished models are registered (and where state is kept).
        hub: The hub client (endpoint, token); a default :class:`HubClient` when None.
        models_dir: Where models go; by default the first model folder online (`hearth folders`), read at
            each download: ``<registry home>/models`` until a person adds another.
        disk_free: Returns the free bytes at a path (``shutil.disk_usage`` by default); tests pass
            their own to simulate a full disk.
        max_parallel: Downloads transferring at once; the others wait as ``queued``.
        retries: Tries per file after a dropped connection or server error before giving up.
        disk_margin: Bytes to leave free beyond the download itself.
        progress_interval: Least seconds between progress events of one job.
        timeout: Seconds to wait on the hub for each read.
        retry_wait: Seconds before the first retry (doubling each time, at most 8).
    """

    def __init__(
        self,
        registry: ModelRegistry | None = None,
        *,
        hub: HubClient | None = None,
        models_dir: Path | None = None,
        disk_free: Callable[[Path], int] | None = None,
        max_parallel: int = 3,
        retries: int = 5,
        disk_margin: int = DEFAULT_DISK_MARGIN,
        progress_interval: float = 0.25,
        timeout: float = 30.0,
        retry_wait: float = 0.5,
    ) -> None:
        self.registry = registry or ModelRegistry()
        self.hub = hub or HubClient()
        self._models_dir = Path(models_dir) if models_dir else None
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self.disk_free = disk_free or (lambda path: shutil.disk_usage(path).free)
        self.max_parallel = max(1, max_parallel)
        self.disk_margin = disk_margin
        self.progress_interval = progress_interval
        self.fetcher = FileFetcher(self.hub, timeout=timeout, retries=retries, retry_wait=retry_wait)
        self.store = DownloadStore(self.registry.engine)
        self.listeners: list[Listener] = []
        self._jobs: dict[str, DownloadJob] = {}
        self._jobs_lock = threading.Lock()
        self._slots = threading.Condition()
        self._running = 0
        self._closed = False
        for stored in self.store.load_all():
            self._jobs[stored.plan.id] = self._revive(stored)

    # -- public ------------------------------------------------------------------------------------
    @property
    def models_dir(self) -> Path:
        """Where downloads go now (see the class's ``models_dir``)."""
        if self._models_dir is not None:
            return self._models_dir
        from engine.catalog.model_folders import FolderList

        return FolderList(self.registry.home).downloads_folder()

    def start(
        self,
        repo: str,
        variant: str | None = None,
        *,
        revision: str | None = None,
        listing: RepoListing | None = None,
        on_event: Listener | None = None,
        projector: str | None = None,
    ) -> DownloadJob:
        """Start (or resume) downloading ``variant`` of ``repo``; returns at once.

        An unfinished download of the same variant is resumed rather than started again.

        Args:
            repo: ``owner/name`` on the hub.
            variant: The variant's name (``Q4_K_M``, ``4bit``...); may be None when there is one.
            revision: A branch or commit; the latest when None.
            listing: The repo's listing when the caller already has it (saves a request).
            on_event: Called with a :class:`DownloadStatus` on every event of this job.
            projector: For a repo with ``mmproj`` projectors, the one to pull with a GGUF variant (its precision,
                ``Q8_0``, or file name; ``none`` for none); the F16 one when None. It is fetched, resumed and
                verified as the model's files are, and registered as the model's pair.

        Raises:
            HubError: the repo could not be listed (missing, gated, no network...).
            InvalidRequest: no such variant (or projector), or several and none named.
            InsufficientDiskSpace: the download does not fit on the disk; nothing was started.
        """
        if self._closed:
            raise InvalidRequest("This download manager is closed; create a new one.")
        listing = listing or self.hub.repo(repo, revision=revision)
        chosen = listing.pick(variant, projector=projector)
        existing = self.find(listing.repo, chosen.name)
        if existing is not None:
            if on_event is not None:
                existing.subscribe(on_event)
            existing.resume()
            return existing
        plan = DownloadPlan(
            id=uuid.uuid4().hex[:16],
            repo=listing.repo,
            variant=chosen.name,
            revision=listing.revision,
            format=chosen.format,
            files=chosen.download_files,
        )
        self.check_paths(plan)
        self.check_disk(plan, 0)
        job = DownloadJob(self, plan, state=DownloadState.QUEUED)
        if on_event is not None:
            job.subscribe(on_event)
        with self._jobs_lock:
            self._jobs[plan.id] = job
        job.save(force=True)
        self.launch(job)
        return job

    def find(self, repo: str, variant: str) -> DownloadJob | None:
        """The unfinished download of ``repo``'s ``variant``, if there is one."""
        for job in reversed(self.jobs()):
            if job.plan.repo == repo and job.plan.variant.lower() == variant.lower() and not job.state.finished:
                return job
        return None

    def get(self, job_id: str) -> DownloadJob:
        """The download with id ``job_id``.

        Raises:
            InvalidRequest: there is none.
        """
        job = self._jobs.get(job_id)
        if job is None:
            raise InvalidRequest(f"There is no download with id '{job_id}'; list them to see the current ids.")
        return job

    def jobs(self) -> list[DownloadJob]:
        """Every download this manager knows, oldest first (finished ones too, until forgotten)."""
        with self._jobs_lock:
            return list(self._jobs.values())

    def status(self) -> list[DownloadStatus]:
        return [job.status() for job in self.jobs()]

    def pause(self, job_id: str) -> None:
        self.get(job_id).pause()

    def resume(self, job_id: str) -> None:
        self.get(job_id).resume()

    def cancel(self, job_id: str) -> None:
        self.get(job_id).cancel()

    def forget(self, job_id: str) -> None:
        """Drop a completed, cancelled or failed download from the list (and cancel a paused one)."""
        job = self.get(job_id)
        if job.state.active:
            raise InvalidRequest(f"The download of {job.name} is still running; pause or cancel it first.")
        if not job.state.finished:
            job.cancel()
        self.store.delete(job_id)
        with self._jobs_lock:
            self._jobs.pop(job_id, None)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with the events of every job; returns a function that stops it."""
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener) if listener in self.listeners else None

    def resume_interrupted(self) -> list[DownloadJob]:
        """Resume the downloads that were running when the last process stopped."""
        resumed = []
        for job in self.jobs():
            if job.interrupted and job.state is DownloadState.PAUSED:
                try:
                    job.resume()
                except HearthError as exc:
                    log.warning("could not resume %s: %s", job.name, exc)
                    continue
                resumed.append(job)
        return resumed

    def close(self, timeout: float = 10.0) -> None:
        """Pause every running download and wait for the threads.

        Downloads that were running are stored as interrupted, so that the next manager's
        :meth:`resume_interrupted` picks them up (as after a crash).
        """
        self._closed = True
        active = [job for job in self.jobs() if job.state.active]
        for job in active:
            job.pause()
        for job in self.jobs():
            if job.thread is not None:
                job.thread.join(timeout)
        for job in active:
            if job.state is DownloadState.PAUSED:
                self.store.save(job.plan, state=DownloadState.QUEUED.value, done_files=job.done_files, bytes_done=job.bytes_on_disk())

    # -- internals ---------------------------------------------------------------------------------
    def _revive(self, stored: StoredDownload) -> DownloadJob:
        state = DownloadState(stored.state)
        interrupted = state.active
        if interrupted:  # the process that ran it died: what it fetched is on disk, ready to resume
            state = DownloadState.PAUSED
        return DownloadJob(
            self,
            stored.plan,
            state=state,
            done_files=stored.done_files,
            error=stored.error,
            model_name=stored.model_name,
            interrupted=interrupted,
        )


    def partial_root(self, plan: DownloadPlan) -> Path:
        """Where a download's unfinished files live (never taken for models)."""
        return self.models_dir / PARTIAL_DIR / plan.id

    def discard_partial(self, plan: DownloadPlan) -> None:
        shutil.rmtree(self.partial_root(plan), ignore_errors=True)

    def check_paths(self, plan: DownloadPlan) -> None:
        """Refuse a download any of whose files (or its repo's folder) would land outside the models folder.

        Raises:
            UnsafeHubPath: one would.
        """
        root = inside(self.models_dir, plan.repo, repo=plan.repo)
        partial = self.partial_root(plan)
        for f in plan.files:
            inside(root, f.path, repo=plan.repo)
            inside(partial, f.path, suffix=PART_SUFFIX, repo=plan.repo)

    def check_disk(self, plan: DownloadPlan, bytes_present: int) -> None:
        """Refuse a download whose remaining bytes (plus a margin) do not fit on the disk.

        Raises:
            InsufficientDiskSpace: they do not.
        """
        needed = plan.bytes_total - bytes_present + self.disk_margin
        free = int(self.disk_free(self.models_dir))
        if free < needed:
            raise InsufficientDiskSpace(needed=needed, free=free, path=str(self.models_dir))

    def launch(self, job: DownloadJob) -> None:
        """Queue ``job`` on a thread of its own (it transfers once a slot is free)."""
        thread = job.thread
        if thread is not None and thread.is_alive():
            if job.state.active:
                return
            if thread is not threading.current_thread():
                thread.join()  # it has paused or failed and is tidying up; let it finish first
        job.prepare_run()
        job.set_state(DownloadState.QUEUED)
        job.thread = threading.Thread(target=self._run, args=(job,), name=f"download-{job.id}", daemon=True)
        job.thread.start()

    def _acquire_slot(self, job: DownloadJob) -> bool:
        with self._slots:
            while self._running >= self.max_parallel and not job.stop_requested:
                self._slots.wait(0.2)
            if job.stop_requested:
                return False
            self._running += 1
            return True

    def _release_slot(self) -> None:
        with self._slots:
            self._running -= 1
            self._slots.notify_all()

    def _run(self, job: DownloadJob) -> None:
        if not self._acquire_slot(job):
            self._stopped(job, job.stop_requested or "pause")
            return
        partial = self.partial_root(job.plan)
        lock = ProcessLock(partial / ".lock")
        failure: str | None = None  # published once the partial folder is settled, so a resume never races its cleanup
        try:
            if not self._lock_partial(lock):
                raise DownloadError(
                    f"{job.name} is already being downloaded by another Hearth process; wait for it to finish.",
                    job_id=job.id,
                )
            job.set_state(DownloadState.RUNNING)
            self.check_paths(job.plan)  # also a download stored before listings were checked
            for f in job.plan.files:
                if f.path not in job.done_files:
                    self.fetcher.fetch(job, f, inside(partial, f.path, suffix=PART_SUFFIX, repo=job.plan.repo))
                    job.mark_file_done(f.path)
            model = self._install(job)
            job.set_model(model.name)
            lock.release()
            self.discard_partial(job.plan)
            job.set_state(DownloadState.COMPLETED)
            log.info("downloaded %s to %s", job.name, model.path)
        except Stopped as stop:
            lock.release()
            self._stopped(job, stop.kind)
        except HearthError as exc:
            failure = str(exc)
        except OSError as exc:
            if exc.errno in DISK_FULL:  # paused, not failed: what arrived is kept for the resume
                lock.release()
                log.warning("download %s paused: the disk is full (%s)", job.name, exc)
                job.set_state(
                    DownloadState.PAUSED,
                    error=f"The disk is full, so the download of {job.name} to {self.models_dir} is paused; free some "
                    "space and resume it (what arrived is kept).",
                )
            else:
                failure = f"Could not write {job.name} to {self.models_dir} ({exc.strerror or exc}); check the disk and resume the download."
        except Exception as exc:
            log.exception("download %s failed", job.name)
            failure = f"The download of {job.name} failed unexpectedly ({exc!r}); resume it to try again."
        finally:
            lock.release()
            if failure is not None:
                if not any(partial.rglob("*" + PART_SUFFIX)):
                    self.discard_partial(job.plan)  # nothing left to resume from
                job.set_state(DownloadState.FAILED, error=failure)
            self._release_slot()

    @staticmethod
    def _lock_partial(lock: ProcessLock, patience: float = 2.0) -> bool:
        """Take the partial folder's lock, waiting briefly for a thread of ours that is letting go."""
        deadline = time.monotonic() + patience
        while not lock.acquire():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _stopped(self, job: DownloadJob, kind: str) -> None:
        if kind == "cancel":
            self.discard_partial(job.plan)
            job.set_state(DownloadState.CANCELLED)
        else:
            job.set_state(DownloadState.PAUSED)

    def _install(self, job: DownloadJob) -> LocalModel:
        """Move the verified files into ``<models>/<owner>/<repo>/`` and register the model."""
        plan = job.plan
        partial = self.partial_root(plan)
        root = inside(self.models_dir, plan.repo, repo=plan.repo)
        moved: list[Path] = []
        for f in plan.files:
            dest = inside(root, f.path, repo=plan.repo)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(inside(partial, f.path, suffix=PART_SUFFIX, repo=plan.repo), dest)
            moved.append(dest)
        primary = next((f for f in plan.files if f.path.endswith(".gguf") and not is_projector(f.path)), None)
        path = root / primary.path if plan.format == "gguf" and primary is not None else root
        sha = primary.sha256 if primary is not None else next((f.sha256 for f in plan.files if f.sha256), None)
        projector = next((f for f in plan.files if is_projector(f.path)), None)
        paired = {"mmproj": str(inside(root, projector.path, repo=plan.repo))} if projector is not None else None
        try:
            return self.registry.register(
                path, name=plan.name, source="hub", repo=plan.repo, variant=plan.variant, sha256=sha, replace=True,
                origin_info=paired,
            )
        except HearthError:
            for p in moved:
                p.unlink(missing_ok=True)
            raise


__all__ = ["DownloadManager", "DownloadJob", "DownloadStatus", "DownloadState", "DownloadPlan", "PARTIAL_DIR"]
