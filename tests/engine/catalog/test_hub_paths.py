"""A hostile hub or mirror cannot choose where files go: a listing that names a file outside the
models folder (absolute, ``..``, a drive, backslashes) is refused before anything is written, through
the real huggingface_hub client against the local hub stand-in."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from engine.catalog.download_job import DownloadState
from engine.catalog.download_store import DownloadPlan
from engine.catalog.downloads import DownloadManager
from engine.catalog.hub import HubClient
from engine.catalog.hub_paths import is_safe_name
from engine.catalog.registry import ModelRegistry
from engine.catalog.variants import RemoteFile
from engine.errors import UnsafeHubPath
from tests.hubserver import FakeHub, HubFile, HubRepo

HOSTILE = ["../../.bashrc", "/etc/x", "a/../../b", "C:\\x", "models\\..\\..\\x.gguf", "C:x", "./x.gguf", "a//b.gguf"]
PAYLOAD = b"export EVIL=1\n"


def evil_repos() -> list[HubRepo]:
    repos = []
    for i, name in enumerate(HOSTILE):
        files = [HubFile(f"model-{i}.Q4_K_M.gguf", b"GGUF" + bytes(64)), HubFile(name, PAYLOAD)]
        repos.append(HubRepo(f"Evil/Repo-{i}-GGUF", files, tags=["gguf"]))
    return repos


@pytest.fixture
def evil_hub():
    with FakeHub(evil_repos()) as hub:
        yield hub


def written(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix not in (".db", ".db-wal", ".db-shm", ".db-journal", ".lock"))


def test_names_that_leave_their_folder_are_told_from_plain_ones():
    assert all(not is_safe_name(n) for n in [*HOSTILE, "", "..", "/", "a/", "\0x"])
    assert all(is_safe_name(n) for n in ["model.gguf", "sub/dir/model-00001-of-00002.gguf", "..hidden", "a..b/c.json"])


@pytest.mark.parametrize("i", range(len(HOSTILE)))
def test_a_listing_with_a_file_outside_the_models_folder_is_refused_and_nothing_written(evil_hub, tmp_path, i):
    repo = f"Evil/Repo-{i}-GGUF"
    client = HubClient(endpoint=evil_hub.url, token=None)
    with pytest.raises(UnsafeHubPath) as caught:
        client.repo(repo)
    assert repr(HOSTILE[i]) in str(caught.value) and "outside the models folder" in str(caught.value)

    home = tmp_path / "home"
    registry = ModelRegistry(home, register_starter=False)
    manager = DownloadManager(registry, hub=client)
    try:
        with pytest.raises(UnsafeHubPath):
            manager.start(repo, "Q4_K_M")
        assert manager.jobs() == []
    finally:
        manager.close()
        registry.close()
    assert written(tmp_path) == []
    assert not [r for r in evil_hub.requests if "/resolve/" in r.path]  # not one byte was asked for


def test_a_stored_download_that_names_such_a_file_fails_without_writing_it(tmp_path):
    """A download kept in the database by a Hearth that did not check listings yet."""
    hub = FakeHub([HubRepo("Evil/Stored-GGUF", [HubFile("a/../../../outside.gguf", PAYLOAD)], tags=["gguf"])])
    with hub:
        home = tmp_path / "home"
        registry = ModelRegistry(home, register_starter=False)
        client = HubClient(endpoint=hub.url, token=None)
        first = DownloadManager(registry, hub=client)
        plan = DownloadPlan(
            id="0123456789abcdef", repo="Evil/Stored-GGUF", variant="Q4_K_M", revision="main", format="gguf",
            files=(RemoteFile("a/../../../outside.gguf", len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest()),),
        )
        first.store.save(plan, state=DownloadState.QUEUED.value, done_files=(), bytes_done=0)
        first.close()
        manager = DownloadManager(registry, hub=client)
        try:
            (job,) = manager.jobs()
            job.resume()
            status = job.wait(20)
            assert status.state is DownloadState.FAILED
            assert "outside the models folder" in status.error
        finally:
            manager.close()
            registry.close()
    assert written(tmp_path) == []
