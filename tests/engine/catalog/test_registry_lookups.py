"""The registry keeps its answers to lookups by name until the database changes, whoever changes it."""

from __future__ import annotations

import shutil
import subprocess
import sys

from sqlalchemy import event

from engine.catalog.registry import ModelRegistry
from engine.starter import STARTER_NAME, starter_model_path


def _selects(registry: ModelRegistry) -> list[str]:
    seen: list[str] = []
    event.listen(registry.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


def test_a_name_looked_up_again_is_answered_without_a_query(tmp_path):
    registry = ModelRegistry(tmp_path)
    try:
        seen = _selects(registry)
        first = registry.get(STARTER_NAME)
        assert first is not None and len(seen) == 1
        assert registry.get(STARTER_NAME) is first and registry.get(STARTER_NAME) is first
        assert registry.get("no-such-model") is None and registry.get("no-such-model") is None
        assert len(seen) == 2  # one for each name
    finally:
        registry.close()


def test_a_change_by_another_registry_or_another_process_is_seen_at_the_next_lookup(tmp_path):
    worker, other = ModelRegistry(tmp_path), ModelRegistry(tmp_path)
    try:
        copy = tmp_path / "copy.gguf"
        shutil.copyfile(starter_model_path(), copy)
        assert worker.get("copy") is None
        other.register(copy, name="copy")  # as `hearth pull` or the app's import would, beside the worker
        assert worker.get("copy") is not None and worker.get("copy").path == copy
        moved = tmp_path / "moved.gguf"
        code = (  # another program writes the database directly
            "import sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1])\n"
            "db.execute('UPDATE models SET path = ? WHERE name = ?', (sys.argv[2], 'copy'))\n"
            "db.commit()\n"
        )
        subprocess.run([sys.executable, "-c", code, str(tmp_path / "registry.db"), str(moved)], check=True, timeout=60)
        assert worker.get("copy").path == moved
        other.remove("copy")
        assert worker.get("copy") is None
    finally:
        worker.close()
        other.close()



def test_a_model_says_since_when_it_is_here_registered_or_served_from_a_path(tmp_path):
    from datetime import UTC, datetime

    from engine.catalog.registry import LocalModel

    registry = ModelRegistry(tmp_path)
    try:
        registered = registry.get(STARTER_NAME)
        assert registered is not None and registered.since is not None and registered.since.tzinfo is not None
        assert abs((registered.since - datetime.now(UTC)).total_seconds()) < 600  # registered just now
    finally:
        registry.close()
    folder = tmp_path / "a-model"
    folder.mkdir()
    served = LocalModel(name="a-model", path=folder, format="safetensors", source="path", size_bytes=0)
    assert served.since == datetime.fromtimestamp(folder.stat().st_mtime, UTC)  # /v1/models' created, /api/tags' modified_at
    assert LocalModel(name="gone", path=tmp_path / "gone", format="gguf", source="path", size_bytes=0).since is None


def test_a_name_in_another_case_finds_the_one_model_it_matches(tmp_path):
    import pytest

    from engine.errors import AmbiguousModel, ModelNotFound
    from engine.starter import STARTER_REPO

    registry = ModelRegistry(tmp_path)
    try:
        starter = registry.resolve(STARTER_NAME)
        assert registry.resolve(STARTER_NAME.upper()).name == starter.name  # as Ollama matches names
        assert registry.resolve(STARTER_REPO.upper()).name == starter.name  # and the Hub its repos
        with pytest.raises(ModelNotFound):
            registry.resolve("no-such-model")
        copy = tmp_path / "copy.gguf"
        shutil.copyfile(starter_model_path(), copy)
        registry.register(copy, name=STARTER_NAME.upper())
        assert registry.resolve(STARTER_NAME.upper()).path == copy  # an exact name wins
        with pytest.raises(AmbiguousModel, match="several local models but for case"):
            registry.resolve(STARTER_NAME.title())
        # what is removed is named exactly: another case (a model served from a path of that name) removes nothing
        with pytest.raises(ModelNotFound):
            registry.remove(STARTER_NAME.title())
        assert {m.name for m in registry.list()} >= {STARTER_NAME, STARTER_NAME.upper()}
    finally:
        registry.close()


def test_a_folder_named_as_a_model_in_another_case_is_that_folder(tmp_path, monkeypatch):
    # `hearth serve --model SmolLM2-135M-Instruct` beside a Hub download's folder of that name: the folder
    from engine.catalog.registry import resolve_model

    registry = ModelRegistry(tmp_path / "home")
    try:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "SmolLM2-135M-Instruct").mkdir()
        assert resolve_model("SmolLM2-135M-Instruct", registry).source == "path"
        if not (tmp_path / "SMOLLM2-135M-INSTRUCT").exists():  # a file system that tells case apart
            assert resolve_model("SMOLLM2-135M-INSTRUCT", registry).name == STARTER_NAME  # no such folder: the name
    finally:
        registry.close()


def test_a_name_of_ollamas_library_finds_the_listed_repos_model_pulled_here(tmp_path):
    """After `ollama pull llama3.2:1b` fetched the listed repo's variant, `llama3.2:1b` names it (a tag's
    quantization names one of several); an exact name still wins, and a name it does not have is not found."""
    import pytest

    from engine.errors import AmbiguousModel, ModelNotFound

    repo = "bartowski/Llama-3.2-1B-Instruct-GGUF"
    registry = ModelRegistry(tmp_path)
    try:
        with pytest.raises(ModelNotFound):
            registry.resolve("llama3.2:1b")  # not pulled
        q8 = tmp_path / "q8.gguf"
        shutil.copyfile(starter_model_path(), q8)
        registry.register(q8, name=f"{repo}:Q8_0", source="download", repo=repo, variant="Q8_0")
        assert registry.resolve("llama3.2:1b").name == f"{repo}:Q8_0"
        assert registry.resolve("library/llama3.2:1b-instruct-q8_0").name == f"{repo}:Q8_0"
        with pytest.raises(ModelNotFound):
            registry.resolve("llama3.2:1b-q4_K_M")  # that quantization is not here
        with pytest.raises(ModelNotFound):
            registry.resolve("llama3.2:3b")  # another model of the list
        q4 = tmp_path / "q4.gguf"
        shutil.copyfile(starter_model_path(), q4)
        registry.register(q4, name=f"{repo}:Q4_K_M", source="download", repo=repo, variant="Q4_K_M")
        with pytest.raises(AmbiguousModel, match="several local variants"):
            registry.resolve("llama3.2:1b")
        assert registry.resolve("llama3.2:1b-q4_K_M").name == f"{repo}:Q4_K_M"
        registry.register(q8, name="llama3.2:1b")  # a model called so (as Ollama's own, seen with --scan) wins
        assert registry.resolve("llama3.2:1b").path == q8
    finally:
        registry.close()


def test_a_name_without_a_tag_is_its_latest_as_ollama_reads_it(tmp_path):
    """Ollama's models keep their names (`llama3.2:latest`); `llama3.2`, as scripts write it, is that one, and an
    exact name still wins."""
    import pytest

    from engine.errors import ModelNotFound

    registry = ModelRegistry(tmp_path)
    try:
        tagged = tmp_path / "tagged.gguf"
        shutil.copyfile(starter_model_path(), tagged)
        registry.register(tagged, name="myllama:latest")
        assert registry.resolve("myllama").name == "myllama:latest"
        assert registry.resolve("myllama", fold_case=False).name == "myllama:latest"
        with pytest.raises(ModelNotFound):
            registry.resolve("myllama:3b")  # another tag is another model
        plain = tmp_path / "plain.gguf"
        shutil.copyfile(starter_model_path(), plain)
        registry.register(plain, name="myllama")
        assert registry.resolve("myllama").path == plain
    finally:
        registry.close()
