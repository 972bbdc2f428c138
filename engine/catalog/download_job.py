"""One download: its state, the snapshot events carry, and pause/resume/cancel.

:class:`DownloadJob` objects are made by :class:`engine.catalog.downloads.DownloadManager`; this
module holds what a caller holds on to.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from engine.catalog.download_store import DownloadPlan
from engine.errors import InvalidRequest

if TYPE_CHECKING:
    from engine.catalog.downloads import DownloadManager
    from engine.catalog.registry import LocalModel

log = logging.getLogger(__name__)

PART_SUFFIX = ".part"


class DownloadState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        """Queued or running: a thread is working on it."""
        return self in (DownloadState.QUEUED, DownloadState.RUNNING)

    @property
    def finished(self) -> bool:
        """Completed or cancelled: nothing more will happen to it."""
        return self in (DownloadState.COMPLETED, DownloadState.CANCELLED)


@dataclass(frozen=True, slots=True)
class DownloadStatus:
    """A snapshot of one download: what every event carries and ``status()`` returns."""

    id: str
    repo: str
    variant: str
    name: str  # REPO:VARIANT, the name the model is registered under
    format: str
    state: DownloadState
    bytes_done: int
    bytes_total: int
    speed: float  # bytes per second over the last few seconds (0 when not running)
    eta: float | None  # seconds left at that speed
    current_file: str | None
    files_done: int
    files_total: int
    error: str | None = None  # one sentence, when failed
    model: str | None = None  # the registered name, once completed

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "repo": self.repo,
            "variant": self.variant,
            "name": self.name,
            "format": self.format,
            "state": self.state.value,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "speed": self.speed,
            "eta": self.eta,
            "current_file": self.current_file,
            "files_done": self.files_done,
            "files_total": self.files_total,
            "error": self.error,
            "model": self.model,
        }


Listener = Callable[[DownloadStatus], None]


class DownloadJob:
    """One download: its plan, its progress, and pause/resume/cancel."""

    def __init__(
        self,
        manager: DownloadManager,
        plan: DownloadPlan,
        *,
        state: DownloadState,
        done_files: frozenset[str] = frozenset(),
        error: str | None = None,
        model_name: str | None = None,
        interrupted: bool = False,
    ) -> None:
        self.manager = manager
        self.plan = plan
        self.interrupted = interrupted  # it was running when the last process died
        self.thread: threading.Thread | None = None
        self._state = state
        self._published = state  # the state whose event has gone out (what wait() waits on)
        self._done = set(done_files)
        self._error = error
        self._model_name = model_name
        self._current: str | None = None
        self._stop: str | None = None
        self._response: Any = None
        self._cond = threading.Condition()
        self._listeners: list[Listener] = []
        self._samples: deque[tuple[float, int]] = deque()
        self._last_emit = 0.0
        self._last_save = 0.0
        self._bytes_done = self.bytes_on_disk()

    # -- what callers use --------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.plan.id

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def state(self) -> DownloadState:
        return self._state

    @property
    def model(self) -> LocalModel | None:
        """The registered model, once the download completed."""
        return self.manager.registry.get(self._model_name) if self._model_name else None

    def status(self) -> DownloadStatus:
        with self._cond:
            speed = 0.0
            if self._state is DownloadState.RUNNING and len(self._samples) >= 2:
                (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
                if t1 > t0 and time.monotonic() - t1 < 5:
                    speed = (b1 - b0) / (t1 - t0)
            remaining = self.plan.bytes_total - self._bytes_done
            return DownloadStatus(
                id=self.id,
                repo=self.plan.repo,
                variant=self.plan.variant,
                name=self.plan.name,
                format=self.plan.format,
                state=self._state,
                bytes_done=self._bytes_done,
                bytes_total=self.plan.bytes_total,
                speed=speed,
                eta=remaining / speed if speed > 0 else None,
                current_file=self._current,
                files_done=len(self._done),
                files_total=len(self.plan.files),
                error=self._error,
                model=self._model_name,
            )

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every event of this job; returns a function that stops it."""
        with self._cond:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def pause(self) -> None:
        """Stop transferring and keep what arrived; :meth:`resume` continues from there."""
        self._request_stop("pause")

    def cancel(self) -> None:
        """Stop, delete what arrived, and register nothing."""
        with self._cond:
            if self._state.finished:
                return
            active = self._state.active
        if active:
            self._request_stop("cancel")
            return
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()  # a thread that is just leaving (paused or failed) must not race the cleanup
        self.manager.discard_partial(self.plan)
        self.set_state(DownloadState.CANCELLED)

    def resume(self) -> None:
        """Continue a paused, failed or interrupted download (with HTTP Range).

        Raises:
            InsufficientDiskSpace: the rest no longer fits on the disk.
            InvalidRequest: the download was cancelled or has completed.
        """
        with self._cond:
            if self._state.active:
                return
            if self._state.finished:
                raise InvalidRequest(f"The download of {self.name} has {self._state.value}; start a new one instead.")
        self.manager.check_disk(self.plan, self.bytes_on_disk())
        self.manager.launch(self)

    def wait(self, timeout: float | None = None) -> DownloadStatus:
        """Block until the job is no longer queued or running (or ``timeout`` passes).

        When it returns on a state change, that state's event has already gone to every listener.
        """
        with self._cond:
            self._cond.wait_for(lambda: not self._published.active, timeout)
        return self.status()

    # -- used by the manager and the file transfer -------------------------------------------------
    @property
    def stop_requested(self) -> str | None:
        """``"pause"`` or ``"cancel"`` once asked, else None."""
        return self._stop

    @property
    def done_files(self) -> frozenset[str]:
        with self._cond:
            return frozenset(self._done)

    def wait_for_stop(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True (at once) if a pause or cancel is asked meanwhile."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stop is not None, timeout)

    def attach_response(self, response: Any) -> None:
        """The HTTP response being read, so that pause/cancel can close it."""
        with self._cond:
            self._response = response

    def set_current(self, path: str | None) -> None:
        with self._cond:
            self._current = path

    def mark_file_done(self, path: str) -> None:
        with self._cond:
            self._done.add(path)
        self.save(force=True)

    def set_model(self, name: str) -> None:
        with self._cond:
            self._model_name = name

    def prepare_run(self) -> None:
        """Reset the stop request and recount the bytes on disk before a (re)start."""
        with self._cond:
            self._stop = None
            self.interrupted = False
            self._bytes_done = self.bytes_on_disk()

    def bytes_on_disk(self) -> int:
        partial: Path = self.manager.partial_root(self.plan)
        total = 0
        for f in self.plan.files:
            if f.path in self._done:
                total += f.size
            else:
                part = partial / (f.path + PART_SUFFIX)
                total += min(part.stat().st_size, f.size) if part.exists() else 0
        return total

    def set_state(self, state: DownloadState, *, error: str | None = None) -> None:
        """Change state, persist it, tell the listeners, then wake :meth:`wait`."""
        with self._cond:
            self._state = state
            self._error = error
            if state is not DownloadState.RUNNING:
                self._current = None
                self._samples.clear()
        self.save(force=True)
        self._emit(force=True)
        with self._cond:
            self._published = state
            self._cond.notify_all()

    def add_progress(self, n: int) -> None:
        with self._cond:
            self._bytes_done += n
            now = time.monotonic()
            self._samples.append((now, self._bytes_done))
            while len(self._samples) > 2 and now - self._samples[0][0] > 5.0:
                self._samples.popleft()
        self._emit()
        self.save()

    def save(self, force: bool = False) -> None:
        """Persist the job (at most every 2 seconds unless ``force``)."""
        now = time.monotonic()
        if not force and now - self._last_save < 2.0:
            return
        self._last_save = now
        with self._cond:
            state, done_files, bytes_done = self._state.value, frozenset(self._done), self._bytes_done
            error, model_name = self._error, self._model_name
        try:
            self.manager.store.save(
                self.plan, state=state, done_files=done_files, bytes_done=bytes_done, error=error,
                model_name=model_name,
            )  # fmt: skip
        except (OSError, SQLAlchemyError) as exc:
            # A full disk fails the database too; the job goes on in memory and is saved at its
            # next state change, and the files on disk are what a resume trusts anyway.
            log.warning("could not save the state of download %s: %s", self.id, exc)

    def _request_stop(self, kind: str) -> None:
        with self._cond:
            if not self._state.active:
                return
            self._stop = kind
            response = self._response
            self._cond.notify_all()
        if response is not None:
            try:  # wakes a read that waits on a stalled connection
                response.close()
            except Exception as exc:  # closing from another thread may race with the reader
                log.debug("closing the response of %s: %r", self.id, exc)

    def _emit(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_emit < self.manager.progress_interval:
            return
        self._last_emit = now
        status = self.status()
        with self._cond:
            listeners = list(self._listeners)
        for listener in [*listeners, *self.manager.listeners]:
            try:
                listener(status)
            except Exception:
                log.exception("a download listener failed")


__all__ = ["DownloadJob", "DownloadState", "DownloadStatus", "Listener", "PART_SUFFIX"]
