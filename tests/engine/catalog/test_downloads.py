"""Downloads against the fake hub: resume with Range, hash checks, disk checks, pause, cancel."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from engine.catalog.download_job import DownloadState
from engine.catalog.downloads import DownloadManager
from engine.catalog.hub import HubClient
from engine.errors import InsufficientDiskSpace
from tests.engine.catalog.conftest import GATED, MLX_TINY, ST_TINY, TINY, TOKEN

Q4 = "tiny-llama.Q4_K_M.gguf"


@pytest.fixture
def manager(registry, client):
    m = DownloadManager(registry, hub=client, retry_wait=0.05, progress_interval=0.0)
    yield m
    m.close()


def served(hub, path: str) -> bytes:
    return hub.repos[TINY].file(path).data


def partial_files(manager) -> list:
    return sorted((manager.models_dir / ".partial").rglob("*.part"))


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_a_download_is_verified_registered_and_reported(manager, registry, hub):
    events = []
    job = manager.start(TINY, "Q4_K_M", on_event=events.append)
    status = job.wait(30)
    assert status.state is DownloadState.COMPLETED, status.error
    model = registry.get(f"{TINY}:Q4_K_M")
    assert model is not None and model.source == "hub" and model.format == "gguf"
    assert model.sha256 == hashlib.sha256(served(hub, Q4)).hexdigest()
    assert model.path == manager.models_dir / "TheOrg" / "Tiny-Llama-GGUF" / Q4
    assert model.path.read_bytes() == served(hub, Q4)
    assert registry.resolve(TINY).name == f"{TINY}:Q4_K_M"  # the only local variant answers to the repo name
    assert partial_files(manager) == []
    states = [e.state for e in events]
    assert states[0] is DownloadState.QUEUED and DownloadState.RUNNING in states and states[-1] is DownloadState.COMPLETED
    done = [e.bytes_done for e in events]
    assert done == sorted(done) and events[-1].bytes_done == events[-1].bytes_total == len(served(hub, Q4))
    assert events[-1].model == f"{TINY}:Q4_K_M" and events[-1].to_dict()["state"] == "completed"


def test_a_dropped_connection_resumes_with_range_to_the_right_sha256(manager, registry, hub):
    half = len(served(hub, Q4)) // 2
    hub.drop_after[Q4] = half
    status = manager.start(TINY, "Q4_K_M").wait(30)
    assert status.state is DownloadState.COMPLETED, status.error
    first, second = hub.ranges(Q4)
    assert first is None
    offset = int(second.removeprefix("bytes=").rstrip("-"))
    assert 0 < offset <= half
    assert registry.get(f"{TINY}:Q4_K_M").path.read_bytes() == served(hub, Q4)


def test_a_corrupted_payload_is_rejected_deleted_and_never_registered(manager, registry, hub):
    hub.corrupt.add(Q4)
    job = manager.start(TINY, "Q4_K_M")
    status = job.wait(30)
    assert status.state is DownloadState.FAILED
    assert "failed its sha256 check" in status.error and "nothing was registered" in status.error
    assert registry.get(f"{TINY}:Q4_K_M") is None
    assert partial_files(manager) == []
    assert not (manager.models_dir / "TheOrg").exists()
    hub.corrupt.clear()  # the hub is fixed: trying again fetches the file afresh and succeeds
    job.resume()
    assert job.wait(30).state is DownloadState.COMPLETED
    assert hub.ranges(Q4) == [None, None]
    assert registry.get(f"{TINY}:Q4_K_M").path.read_bytes() == served(hub, Q4)


def test_too_little_disk_is_refused_before_anything_starts(registry, client, hub):
    tight = DownloadManager(registry, hub=client, disk_free=lambda path: 1_000_000)
    try:
        with pytest.raises(InsufficientDiskSpace, match=r"needs 0\.10 GB but only 0\.00 GB is free") as err:
            tight.start(TINY, "Q4_K_M")
        assert err.value.free == 1_000_000 and err.value.needed > len(served(hub, Q4))
        assert tight.jobs() == [] and hub.file_requests(Q4) == []
    finally:
        tight.close()


def test_cancel_leaves_nothing_registered_and_no_partial_file(manager, registry, hub):
    hub.throttle[Q4] = 0.05
    job = manager.start(TINY, "Q4_K_M")
    wait_until(lambda: job.status().bytes_done > 0)
    job.cancel()
    status = job.wait(10)
    assert status.state is DownloadState.CANCELLED
    assert registry.get(f"{TINY}:Q4_K_M") is None
    assert not manager.partial_root(job.plan).exists()
    assert not (manager.models_dir / "TheOrg").exists()


def test_pause_keeps_the_partial_file_and_resume_continues_it(manager, registry, hub):
    hub.throttle[Q4] = 0.05
    job = manager.start(TINY, "Q4_K_M")
    wait_until(lambda: job.status().bytes_done > 100_000)
    job.pause()
    status = job.wait(10)
    assert status.state is DownloadState.PAUSED
    (part,) = partial_files(manager)
    kept = part.stat().st_size
    assert 0 < kept < len(served(hub, Q4)) and part.name.endswith(".gguf.part")
    assert registry.get(f"{TINY}:Q4_K_M") is None
    hub.throttle.clear()
    job.resume()
    assert job.wait(30).state is DownloadState.COMPLETED
    assert hub.ranges(Q4)[-1] == f"bytes={kept}-"
    assert registry.get(f"{TINY}:Q4_K_M").path.read_bytes() == served(hub, Q4)


def test_a_new_manager_resumes_what_the_last_one_left(registry, client, hub):
    hub.throttle[Q4] = 0.05
    first = DownloadManager(registry, hub=client)
    job = first.start(TINY, "Q4_K_M")
    wait_until(lambda: job.status().bytes_done > 50_000)
    first.close()  # what an app does on quit: downloads pause and their state stays in the database
    assert job.state is DownloadState.PAUSED
    second = DownloadManager(registry, hub=client)
    try:
        (again,) = second.jobs()
        assert (again.id, again.state, again.interrupted) == (job.id, DownloadState.PAUSED, True)
        assert again.status().bytes_done > 0
        hub.throttle.clear()
        assert second.resume_interrupted() == [again]
        assert second.start(TINY, "Q4_K_M") is again  # asking again joins the same download
        assert again.wait(30).state is DownloadState.COMPLETED
        assert hub.ranges(Q4)[-1].startswith("bytes=") and hub.ranges(Q4)[-1] != "bytes=0-"
    finally:
        second.close()


def test_several_downloads_run_at_once_up_to_the_limit(registry, client, hub):
    for name in ("tiny-llama.Q2_K.gguf", "tiny-llama.Q8_0.gguf", "tiny-llama.F16.gguf"):
        hub.throttle[name] = 0.05
    m = DownloadManager(registry, hub=client, max_parallel=2, progress_interval=0.0)
    seen: dict[str, set] = {}
    running_at_once = []
    lock = threading.Lock()

    def track(status):
        with lock:
            seen.setdefault(status.variant, set()).add(status.state)
            running_at_once.append(sum(1 for j in m.jobs() if j.state is DownloadState.RUNNING))

    try:
        jobs = [m.start(TINY, v, on_event=track) for v in ("Q2_K", "Q8_0", "F16")]
        assert [j.wait(60).state for j in jobs] == [DownloadState.COMPLETED] * 3
        assert max(running_at_once) == 2
        assert {f"{TINY}:{v}" for v in ("Q2_K", "Q8_0", "F16")} <= {x.name for x in registry.list()}
    finally:
        m.close()


def test_split_gguf_and_folder_models_download_whole(manager, registry, hub):
    for repo, variant in ((TINY, "Q6_K"), (MLX_TINY, None), (ST_TINY, None)):
        status = manager.start(repo, variant).wait(30)
        assert status.state is DownloadState.COMPLETED, status.error
    q6 = registry.get(f"{TINY}:Q6_K")
    assert q6.path.name == "tiny-llama.Q6_K-00001-of-00002.gguf"
    assert (q6.path.parent / "tiny-llama.Q6_K-00002-of-00002.gguf").exists()
    assert q6.size_bytes == sum(len(f.data) for f in hub.repos[TINY].files if "Q6_K" in f.path)
    mlx = registry.get(f"{MLX_TINY}:4bit")
    assert mlx.format == "mlx" and (mlx.path / "config.json").exists() and mlx.has_chat_template
    assert registry.get(f"{ST_TINY}:BF16").format == "safetensors"
    registry.remove(f"{TINY}:Q6_K", delete_files=True)
    assert not list(q6.path.parent.glob("tiny-llama.Q6_K-*"))


def test_a_gated_repo_needs_a_token(registry, hub):
    anonymous = DownloadManager(registry, hub=HubClient(endpoint=hub.url, token=None), retry_wait=0.05)
    try:
        status = anonymous.start(GATED).wait(30)
        assert status.state is DownloadState.FAILED and "is gated" in status.error and "HF_TOKEN" in status.error
    finally:
        anonymous.close()
    with_token = DownloadManager(registry, hub=HubClient(endpoint=hub.url, token=TOKEN))
    try:
        assert with_token.start(GATED).wait(30).state is DownloadState.COMPLETED
        assert hub.file_requests("gated.Q4_K_M.gguf")[-1].headers["authorization"] == f"Bearer {TOKEN}"
    finally:
        with_token.close()
