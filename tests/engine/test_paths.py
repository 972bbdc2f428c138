"""The data folder is private to its owner: made 0700 with its databases and key files 0600, and a folder
an older Hearth left readable to others is tightened at the next start (Hearth's own files only)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine.catalog.registry import ModelRegistry
from engine.documents.index import DocumentIndex
from engine.paths import hearth_home, logs_dir, models_dir
from engine.remote.providers import ProviderStore

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX modes; Windows keeps the profile private")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_data_folder_and_everything_hearth_keeps_in_it_are_private(tmp_path, monkeypatch):
    old_umask = os.umask(0o022)  # what most desktops set: files 0644, folders 0755 unless told otherwise
    try:
        monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "Hearth"))
        home = hearth_home()
        registry = ModelRegistry(home, register_starter=False)
        index = DocumentIndex(home / "documents.db")
        providers = ProviderStore(home / "remotes.json")
        providers.add("cluster", "http://127.0.0.1:9/v1", api_key="s3cret")
        logs = logs_dir()
        models = models_dir()
    finally:
        os.umask(old_umask)
    try:
        assert mode(home) == 0o700
        assert mode(logs) == 0o700
        assert mode(models) == 0o700
        for name in ("registry.db", "documents.db", "remotes.json", "remote-keys.json"):
            assert mode(home / name) == 0o600, name
        # SQLite gives a database's -wal and -shm files its own mode.
        for side in home.glob("*.db-*"):
            assert mode(side) == 0o600, side.name
    finally:
        index.close()
        registry.close()


def test_a_folder_an_older_hearth_left_open_is_tightened_and_nothing_else_is_touched(tmp_path, monkeypatch):
    home = tmp_path / "Hearth"
    (home / "logs").mkdir(parents=True)
    (home / "models" / "TheOrg" / "Model-GGUF").mkdir(parents=True)
    ours = ["chats.db", "chats.db-wal", "registry.db", "documents.db-shm", "remotes.json", "mcp-servers.json"]
    for name in ours:
        (home / name).write_bytes(b"x")
    (home / "logs" / "worker.log").write_text("a log line\n")
    (home / "embeddings").mkdir()
    embedding = home / "embeddings" / "all-minilm-l6-v2.gguf"
    embedding.write_bytes(b"GGUF")
    other = home / "notes.txt"  # HEARTH_HOME may be a folder that holds other things too
    other.write_text("mine")
    model = home / "models" / "TheOrg" / "Model-GGUF" / "model.gguf"
    model.write_bytes(b"GGUF")
    for path in [home, home / "logs", *home.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)

    monkeypatch.setenv("HEARTH_HOME", str(home))
    assert hearth_home() == home

    assert mode(home) == 0o700 and mode(home / "logs") == 0o700
    for name in ours:
        assert mode(home / name) == 0o600, name
    assert mode(home / "logs" / "worker.log") == 0o600
    assert mode(other) == 0o644  # not Hearth's
    assert mode(model) == 0o644 and mode(model.parent) == 0o755  # model files are left as they are
    assert mode(home / "models") == 0o700  # in a folder only the owner may enter
    assert mode(home / "embeddings") == 0o700 and mode(embedding) == 0o600  # Hearth's own conversion
