"""Fetching one file of a download: HTTP Range from where it stopped, hashing as bytes arrive,
retrying dropped connections, and verifying the result against the hub's hash.

Files are requested through huggingface_hub's URL helper and HTTP session (its headers carry the
token), so a gated repo or a missing file fails with the same hub errors as a listing does.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from engine.catalog.download_job import DownloadJob
from engine.catalog.hub import HubClient, transport_errors
from engine.catalog.variants import RemoteFile
from engine.errors import DownloadError

log = logging.getLogger(__name__)

_RETRY_STATUS = (408, 429, 500, 502, 503, 504)
_HASH_BLOCK = 1 << 20


class Stopped(Exception):
    """Raised inside a transfer when the job was asked to pause or cancel."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class _Retryable(Exception):
    """A transient failure (server error, rate limit, short body) worth another try."""


def new_hasher(f: RemoteFile) -> Any:
    """The hash ``f`` is checked against: its LFS sha256, else git's blob sha1, else None."""
    if f.sha256:
        return hashlib.sha256()
    if f.blob_id:
        h = hashlib.sha1(usedforsecurity=False)
        h.update(b"blob %d\0" % f.size)
        return h
    return None


class ProcessLock:
    """An exclusive lock on a file that the OS releases if the process dies (flock / msvcrt)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except ImportError:  # Windows
                import msvcrt

                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class FileFetcher:
    """Fetches files of downloads into their partial area.

    Args:
        hub: The hub client (endpoint, token, error translation).
        timeout: Seconds to wait for each read.
        retries: Consecutive failed tries (with no bytes gained) before giving up.
        retry_wait: Seconds before the first retry, doubling up to 8.
    """

    def __init__(self, hub: HubClient, *, timeout: float, retries: int, retry_wait: float) -> None:
        self.hub = hub
        self.timeout = timeout
        self.retries = retries
        self.retry_wait = retry_wait

    def fetch(self, job: DownloadJob, f: RemoteFile, part: Path) -> None:
        """Fetch ``f`` into ``part`` (continuing what is there) and verify it.

        Raises:
            Stopped: the job was paused or cancelled.
            DownloadError: the connection kept failing, or the payload failed its hash check.
            HubError: the hub refused the file (gated, missing...).
        """
        part.parent.mkdir(parents=True, exist_ok=True)
        hasher = new_hasher(f)
        offset = part.stat().st_size if part.exists() else 0
        if offset > f.size:
            part.unlink()
            offset = 0
        if offset and hasher is not None:  # resuming: the hash must cover what is already there
            with part.open("rb") as src:
                while block := src.read(_HASH_BLOCK):
                    hasher.update(block)
        job.set_current(f.path)
        failures = 0
        network = transport_errors()[0]
        while offset < f.size or not part.exists():
            before = offset
            try:
                offset, hasher = self._transfer(job, f, part, offset, hasher)
            except Stopped:
                raise
            except Exception as exc:
                if job.stop_requested:
                    raise Stopped(job.stop_requested) from exc
                if not isinstance(exc, (_Retryable, *network)):
                    raise
                offset = part.stat().st_size if part.exists() else 0
                failures = 0 if offset > before else failures + 1
                if failures > self.retries:
                    raise DownloadError(
                        f"The connection to the hub kept failing while downloading {f.path} ({exc.__class__.__name__}); "
                        "resume the download when the network is back.",
                        job_id=job.id,
                    ) from exc
                wait = min(8.0, self.retry_wait * 2 ** max(0, failures - 1))
                log.info("download of %s interrupted (%r); resuming at byte %d in %.1fs", f.path, exc, offset, wait)
                if job.wait_for_stop(wait):
                    raise Stopped(job.stop_requested or "pause") from exc
        self._verify(job, f, part, hasher)

    def _transfer(self, job: DownloadJob, f: RemoteFile, part: Path, offset: int, hasher: Any) -> tuple[int, Any]:
        from huggingface_hub import get_session
        from huggingface_hub.utils import hf_raise_for_status

        headers = {**self.hub.headers(), "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        url = self.hub.file_url(job.plan.repo, f.path, job.plan.revision)
        with get_session().stream("GET", url, headers=headers, timeout=self.timeout) as r:
            job.attach_response(r)
            try:
                if job.stop_requested:
                    raise Stopped(job.stop_requested)
                if r.status_code in _RETRY_STATUS:
                    raise _Retryable(f"HTTP {r.status_code}")
                if r.status_code == 416:  # asked past the end: what is here is wrong, start over
                    part.unlink(missing_ok=True)
                    return 0, new_hasher(f)
                if r.status_code >= 400:
                    r.read()
                    with self.hub.errors(job.plan.repo):
                        hf_raise_for_status(r)
                if r.status_code == 200 and (offset or part.exists()):  # Range ignored: from the start
                    part.unlink(missing_ok=True)
                    offset, hasher = 0, new_hasher(f)
                with part.open("ab") as out:
                    for chunk in r.iter_bytes():  # as the bytes arrive, so progress and pause are prompt
                        if job.stop_requested:
                            raise Stopped(job.stop_requested)
                        out.write(chunk)
                        if hasher is not None:
                            hasher.update(chunk)
                        offset += len(chunk)
                        job.add_progress(len(chunk))
                        if offset > f.size:
                            break
            finally:
                job.attach_response(None)
        if offset < f.size:
            raise _Retryable("the connection closed before the file was complete")
        return offset, hasher

    def _verify(self, job: DownloadJob, f: RemoteFile, part: Path, hasher: Any) -> None:
        size = part.stat().st_size
        expected = f.sha256 or f.blob_id
        actual = hasher.hexdigest() if hasher is not None else None
        if size == f.size and (expected is None or actual == expected):
            return
        part.unlink(missing_ok=True)
        what = "sha256" if f.sha256 else "git hash" if f.blob_id else "size"
        raise DownloadError(
            f"{f.path} from {job.plan.repo} failed its {what} check against the hub, so it was deleted and nothing "
            "was registered; download it again, and if it fails again the file on the hub is damaged.",
            job_id=job.id,
        )


__all__ = ["FileFetcher", "ProcessLock", "Stopped", "new_hasher"]
