"""A disk that fills up while a download runs: the download pauses with a message, keeps what
arrived, registers nothing, and resumes once there is room."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from engine.catalog.download_job import DownloadState
from engine.catalog.downloads import DownloadManager
from engine.catalog.hub import HubClient
from engine.catalog.registry import ModelRegistry
from tests.engine.catalog.conftest import TINY
from tests.engine.catalog.test_downloads import Q4, partial_files, served, wait_until

DISK_BYTES = 4 * 1024 * 1024


def _mount(args: list[str]) -> str | None:
    """None when the mount worked, else why not."""
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if r.returncode == 0 else (r.stderr.strip() or f"exit {r.returncode}")


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB file system of its own: a tmpfs, else a loop-mounted ext2 image."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    why = _mount(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mnt)])
    if why is not None:
        image = tmp_path / "disk.img"
        with image.open("wb") as f:
            f.truncate(DISK_BYTES)
        mkfs = shutil.which("mkfs.ext2") or shutil.which("mke2fs")
        loop_why = _mount([mkfs, "-q", "-F", str(image)]) if mkfs else "no mkfs.ext2"
        loop_why = loop_why or _mount(["mount", "-o", "loop", str(image), str(mnt)])
        if loop_why is not None:
            pytest.skip(
                f"a small file system cannot be mounted here (tmpfs: {why}; loop: {loop_why}); "
                "the disk-full test needs root to mount one"
            )
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def fill_up(path) -> None:
    """Another program takes every byte left on the disk."""
    try:
        with path.open("wb") as f:
            while True:
                f.write(b"\0" * 65536)
    except OSError:
        pass


def test_a_disk_filling_up_pauses_the_download_and_registers_nothing(small_disk, hub):
    registry = ModelRegistry(small_disk / "home", register_starter=False)
    client = HubClient(endpoint=hub.url, token=None, timeout=5)
    manager = DownloadManager(registry, hub=client, retry_wait=0.05, progress_interval=0.0, disk_margin=0)
    try:
        hub.throttle[Q4] = 0.05
        job = manager.start(TINY, "Q4_K_M")
        wait_until(lambda: job.status().bytes_done > 100_000)
        filler = small_disk / "filler"
        fill_up(filler)
        hub.throttle.clear()

        status = job.wait(60)
        assert status.state is DownloadState.PAUSED, status.error
        assert "disk is full" in status.error and "free some space and resume" in status.error
        assert registry.get(f"{TINY}:Q4_K_M") is None and registry.list() == []
        (part,) = partial_files(manager)  # what arrived is kept for the resume
        kept = part.stat().st_size
        assert 0 < kept < len(served(hub, Q4))

        filler.unlink()
        job.resume()
        status = job.wait(60)
        assert status.state is DownloadState.COMPLETED, status.error
        assert hub.ranges(Q4)[-1] == f"bytes={kept}-"
        assert registry.get(f"{TINY}:Q4_K_M").path.read_bytes() == served(hub, Q4)
    finally:
        manager.close()
        registry.close()
