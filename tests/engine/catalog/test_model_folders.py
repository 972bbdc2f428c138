"""Several model folders: models found in each, downloads to the first, a folder on a removed drive offline
(its models gone while it is, back when it returns), through the API and `hearth folders`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.catalog.model_folders import FolderList
from engine.catalog.registry import ModelRegistry

NAME = "TheOrg/Tiny-GGUF:Q4_1"


def _folder(root: Path, starter: Path) -> Path:
    """A folder laid out as LM Studio lays one out, its model a hard link to the starter GGUF (no copy)."""
    repo = root / "TheOrg" / "Tiny-GGUF"
    repo.mkdir(parents=True)
    os.link(starter, repo / "tiny-Q4_1.gguf")
    return root


@pytest.fixture()
def api(tmp_path):
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    registry = ModelRegistry(tmp_path / "home")
    manager = ModelManager(registry)
    try:
        with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as client:
            yield client, registry
    finally:
        manager.close()
        registry.close()


def _names(client) -> list[str]:
    return [m["name"] for m in client.get("/api/models").json()["models"]]


def test_a_folders_models_are_listed_in_place_and_an_offline_folder_is_no_error(api, tmp_path, starter_path):
    client, registry = api
    own = registry.home / "models"
    assert client.get("/api/folders").json() == {"folders": [{"path": str(own), "online": True, "downloads": True, "models": 0}]}
    drive = _folder(tmp_path / "drive", starter_path)
    added = client.post("/api/folders", json={"path": str(drive)}).json()["folders"]
    assert [(f["path"], f["online"], f["downloads"], f["models"]) for f in added] == [(str(own), True, True, 0), (str(drive), True, False, 1)]
    (entry,) = [m for m in client.get("/api/models").json()["models"] if m["name"] == NAME]
    assert entry["path"] == str(drive / "TheOrg" / "Tiny-GGUF" / "tiny-Q4_1.gguf") and entry["origin"] == "folder"
    assert entry["origin_label"] == "Model folder"  # the badge (the origin's own name is no word for the user)
    assert not any(own.rglob("*.gguf"))  # read in place, not copied
    assert client.post("/api/folders", json={"path": str(drive)}).status_code == 400  # listed already

    drive.rename(tmp_path / "unplugged")  # the drive is taken out
    offline = client.get("/api/folders")
    assert offline.status_code == 200 and offline.json()["folders"][1] == {"path": str(drive), "online": False, "downloads": False, "models": 0}
    assert NAME not in _names(client)
    (tmp_path / "unplugged").rename(drive)  # and put back: its models return, no restart
    assert NAME in _names(client)

    gone = client.delete("/api/folders", params={"path": str(drive)})
    assert gone.status_code == 200 and [f["path"] for f in gone.json()["folders"]] == [str(own)]
    assert NAME not in _names(client) and (drive / "TheOrg" / "Tiny-GGUF" / "tiny-Q4_1.gguf").is_file()
    last = client.delete("/api/folders", params={"path": str(own)})
    assert last.status_code == 400 and "one model folder" in last.json()["error"]["message"]
    missing = client.post("/api/folders", json={"path": str(tmp_path / "nowhere")})
    assert missing.status_code == 400 and "is not a folder" in missing.json()["error"]["message"]


def test_a_folder_model_removed_from_hearth_keeps_its_file_and_stays_out(api, tmp_path, starter_path):
    client, registry = api
    drive = _folder(tmp_path / "drive", starter_path)
    client.post("/api/folders", json={"path": str(drive)})
    assert NAME in _names(client)
    assert client.delete(f"/api/models/{NAME}").json()["files_kept"] is True
    assert NAME not in _names(client) and (drive / "TheOrg" / "Tiny-GGUF" / "tiny-Q4_1.gguf").is_file()


def test_a_listing_that_read_the_old_folders_does_not_forget_a_model_added_meanwhile(tmp_path, starter_path, monkeypatch):
    """Two requests at once: a model listing reads the folder list, then another request adds a folder and
    registers its model. The listing must not take that model for one of a folder taken off the list."""
    import threading

    from engine.catalog import model_folders

    registry = ModelRegistry(tmp_path / "home", register_starter=False)
    drive = _folder(tmp_path / "drive", starter_path)
    read, go_on, registered = threading.Event(), threading.Event(), threading.Event()
    real_folders = FolderList.folders

    def slow_folders(self):
        rows = real_folders(self)
        if threading.current_thread().name == "listing":  # the listing pauses right after reading the list
            read.set()
            go_on.wait(10)
        return rows

    from engine.catalog import other_apps_sync

    real_register = other_apps_sync.register_found

    def register(*args, **kwargs):
        model = real_register(*args, **kwargs)
        registered.set()
        return model

    monkeypatch.setattr(FolderList, "folders", slow_folders)
    monkeypatch.setattr(other_apps_sync, "register_found", register)
    try:
        listing = threading.Thread(target=model_folders.sync_folders, args=(registry,), name="listing")
        listing.start()
        assert read.wait(10)
        FolderList(registry.home).add(str(drive))
        adder = threading.Thread(target=model_folders.sync_folders, args=(registry,))
        adder.start()
        registered.wait(3)  # it waits for the listing, which holds the sync lock (without it, it registers now)
        go_on.set()
        listing.join(10)
        adder.join(10)
        assert [m.name for m in registry.list()] == [NAME]
        assert model_folders.count_models(registry, drive) == 1
    finally:
        go_on.set()
        registry.close()


def test_a_listing_never_shows_a_folder_added_meanwhile_with_none_of_its_models(tmp_path, starter_path, monkeypatch):
    """``GET /api/folders`` while another request adds a folder: the listing registers and counts from one
    read of the folder list, so it shows the new folder with its models, or not yet, never with "0 models"
    (the app's list kept that stale line when the listing's answer came last)."""
    import threading

    from engine.catalog import model_folders

    registry = ModelRegistry(tmp_path / "home", register_starter=False)
    drive = _folder(tmp_path / "drive", starter_path)
    read, go_on = threading.Event(), threading.Event()
    real_folders = FolderList.folders

    def slow_folders(self):
        rows = real_folders(self)
        if threading.current_thread().name == "listing" and not read.is_set():  # pauses after its first read
            read.set()
            go_on.wait(10)
        return rows

    monkeypatch.setattr(FolderList, "folders", slow_folders)
    answers = []
    try:
        listing = threading.Thread(
            target=lambda: answers.append(model_folders.folder_rows(registry, sync=True)), name="listing"
        )
        listing.start()
        assert read.wait(10)
        FolderList(registry.home).add(str(drive))  # the other request's add, while the listing is under way
        go_on.set()
        listing.join(10)
        [rows] = answers
        assert all(row["models"] == 1 for row in rows if row["path"] == str(drive)), rows
        [row] = [r for r in model_folders.folder_rows(registry, sync=True) if r["path"] == str(drive)]
        assert row["models"] == 1  # the adding request's own answer
    finally:
        go_on.set()
        registry.close()


def test_downloads_go_to_the_first_folder_online(tmp_path):
    from engine.catalog.downloads import DownloadManager

    registry = ModelRegistry(tmp_path / "home", register_starter=False)
    folders = FolderList(registry.home)
    first = tmp_path / "big-disk"
    first.mkdir()
    folders.add(str(first), first=True)
    downloads = DownloadManager(registry)
    try:
        assert downloads.models_dir == first
        first.rename(tmp_path / "away")  # offline: the next folder online takes them
        assert downloads.models_dir == registry.home / "models"
        assert [(f.path, f.online, f.downloads) for f in folders.folders()] == [
            (first, False, False), (registry.home / "models", True, True)]  # fmt: skip
    finally:
        downloads.close()
        registry.close()


def test_hearth_folders_add_list_rm_with_json(tmp_path, starter_path):
    home = tmp_path / "home"
    drive = _folder(tmp_path / "drive", starter_path)
    env = {**os.environ, "HEARTH_HOME": str(home)}

    def hearth(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "engine.cli", "folders", *args], capture_output=True, text=True, env=env, timeout=120)

    added = hearth("add", str(drive), "--json")
    assert added.returncode == 0, added.stderr
    rows = json.loads(added.stdout)["folders"]
    assert [(r["path"], r["models"]) for r in rows] == [(str(home / "models"), 0), (str(drive), 1)]  # the starter lies elsewhere
    said = hearth("list")
    assert said.returncode == 0 and f"{drive}  1 model" in said.stdout and "1 models" not in said.stdout and "(downloads)" in said.stdout
    again = hearth("add", str(drive))
    assert again.returncode == 1 and again.stderr.strip() == f"hearth: {drive} is already a model folder."
    removed = hearth("rm", str(drive), "--json")
    assert [r["path"] for r in json.loads(removed.stdout)["folders"]] == [str(home / "models")]
