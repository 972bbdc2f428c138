"""Other apps' models read in place: a fake Ollama store, an LM Studio folder, Jan's and GPT4All's, and a
Hugging Face cache, all built here as those apps lay them out, with the starter GGUF linked in."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.catalog.other_apps import OtherAppRoots, scan_other_apps, summary
from engine.catalog.other_apps_sync import accept, dismissed_names, refresh
from engine.catalog.registry import ModelRegistry
from engine.errors import InvalidRequest
from tests.engine.catalog.conftest import llama_config, make_gguf, make_safetensors
from tests.engine.catalog.other_apps_fixtures import (
    PARAMS,
    SYSTEM,
    hf_cache_repo,
    link,
    lmstudio_folder,
    ollama_store,
    write_manifest,
)

OLLAMA_NAME = "smollm2:135m"
EXPECTED_PROMPT = (
    "<|im_start|>system\nYou are a pirate.<|im_end|>\n<|im_start|>user\nName three colours.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def projector(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("projector") / "mmproj.gguf"
    make_gguf(path, label="F16", n_floats=64)
    return path


@pytest.fixture
def roots(tmp_path: Path, starter_path: Path, projector: Path) -> OtherAppRoots:
    """Every app's store in tmp_path (nothing of the real home is read)."""
    ollama = tmp_path / "ollama"
    ollama_store(ollama, starter_path, projector=projector)
    ollama_store(ollama, starter_path, parts=("registry.ollama.ai", "someone", "pirate", "latest"), template=None)
    lmstudio_folder(tmp_path / "lmstudio", starter_path, projector)
    link(starter_path, tmp_path / "jan" / "smollm2-jan" / "model.gguf")
    link(starter_path, tmp_path / "gpt4all" / "SmolLM2-135M.Q4_1.gguf")
    hf = tmp_path / "hf"
    hf_cache_repo(hf, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", {"smollm2-135m-instruct-q4_1.gguf": starter_path})
    tiny_config = llama_config(layers=2, heads=4, kv_heads=2, hidden=64, ctx=512)
    hf_cache_repo(hf, "TheOrg/Tiny-ST", {"config.json": tiny_config, "model.safetensors": make_safetensors(256)})
    return OtherAppRoots(
        ollama=(ollama,), lmstudio=(tmp_path / "lmstudio",), jan=(tmp_path / "jan",), gpt4all=(tmp_path / "gpt4all",),
        hf_cache=(hf,),
    )  # fmt: skip


@pytest.fixture
def registry(tmp_path: Path):
    reg = ModelRegistry(tmp_path / "home", register_starter=False)
    yield reg
    reg.close()


def test_each_app_is_found_under_the_name_its_owner_gives(roots, projector):
    found = {f.name: f for f in scan_other_apps(roots)}
    assert {n: f.origin for n, f in found.items()} == {
        OLLAMA_NAME: "ollama",
        "someone/pirate:latest": "ollama",
        "lmstudio-community/SmolLM2-135M-Instruct-GGUF:Q4_1": "lmstudio",
        "smollm2-jan": "jan",
        "SmolLM2-135M.Q4_1": "gpt4all",
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1": "hf-cache",
        "TheOrg/Tiny-ST": "hf-cache",
    }
    ollama = found[OLLAMA_NAME]
    assert ollama.path.parent == roots.ollama[0] / "blobs" and ollama.path.name.startswith("sha256-")
    assert ollama.params == PARAMS and ollama.system == SYSTEM
    assert ollama.mmproj is not None and ollama.mmproj.read_bytes() == projector.read_bytes()
    # LM Studio's projector is paired with the model beside it, and is no model of its own
    lms = found["lmstudio-community/SmolLM2-135M-Instruct-GGUF:Q4_1"]
    assert lms.mmproj is not None and lms.mmproj.name == "mmproj-SmolLM2-135M-F16.gguf"
    # the cache's snapshot link is kept, not resolved to its blob
    gguf = found["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1"]
    assert gguf.path.is_symlink() and "snapshots" in gguf.path.parts
    st = found["TheOrg/Tiny-ST"]
    assert st.format == "safetensors" and (st.path / "config.json").is_file()
    assert summary([ollama, lms]) == f"Found 2 models from Ollama and LM Studio ({(ollama.size_bytes + lms.size_bytes) / 1e9:.1f} GB)."


def test_registered_in_place_with_origin_and_ollama_defaults(roots, registry, starter_path, tmp_path):
    result = accept(registry, scan_other_apps(roots))
    assert not result.skipped
    models = {m.name: m for m in registry.list()}
    assert len(models) == 7
    m = models[OLLAMA_NAME]
    assert (m.origin, m.source, m.format, m.quantization) == ("ollama", "other-app", "gguf", "Q4_1")
    # nothing copied: the registry points at Ollama's blob, the very inode of the starter file
    assert os.stat(m.path).st_ino == os.stat(starter_path).st_ino
    assert max(p.stat().st_size for p in (tmp_path / "home").rglob("*") if p.is_file()) < 1_000_000
    assert m.origin_info["defaults"] == {**PARAMS, "system": SYSTEM}
    assert m.origin_info["template_source"] == "ollama" and m.chat_template and m.spec.chat_template == m.chat_template
    # no template layer: the GGUF's own Jinja template is used, and the registry says so
    plain = models["someone/pirate:latest"]
    assert plain.origin_info["template_source"] == "gguf" and plain.chat_template is None and plain.spec.chat_template is None
    assert models["lmstudio-community/SmolLM2-135M-Instruct-GGUF:Q4_1"].origin_info["mmproj"].endswith("mmproj-SmolLM2-135M-F16.gguf")
    assert models["TheOrg/Tiny-ST"].format == "safetensors"
    hf = models["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1"]
    assert hf.path.is_symlink() and hf.size_bytes == starter_path.stat().st_size


def test_an_untranslatable_template_falls_back_to_the_gguf_one(tmp_path, registry, starter_path):
    store = tmp_path / "ollama"
    ollama_store(store, starter_path, template='{{ template "other" . }}')
    accept(registry, scan_other_apps(OtherAppRoots(ollama=(store,))))
    m = registry.get(OLLAMA_NAME)
    assert m.origin_info["template_source"] == "gguf" and "not translated" in m.origin_info["template_note"]
    assert m.chat_template is None


def test_a_pull_appears_and_a_delete_disappears_without_a_restart(tmp_path, registry, starter_path):
    store = tmp_path / "ollama"
    roots = OtherAppRoots(ollama=(store,))
    ollama_store(store, starter_path)
    accept(registry, scan_other_apps(roots))
    assert refresh(registry, roots).registered == []  # nothing new: nothing re-read
    # Ollama pulls another tag of the same blob
    manifest = ollama_store(store, starter_path, parts=("registry.ollama.ai", "library", "smollm2", "latest"))
    assert [m.name for m in refresh(registry, roots).registered] == ["smollm2:latest"]
    assert registry.get("smollm2:latest") is not None
    # and deletes it: the manifest goes (the blob stays, the other tag still uses it)
    manifest.unlink()
    assert refresh(registry, roots).removed == ["smollm2:latest"]
    assert registry.get("smollm2:latest") is None and registry.get(OLLAMA_NAME) is not None
    # an app the user never accepted is not registered behind their back
    link(starter_path, tmp_path / "gpt4all" / "x.gguf")
    refresh(registry, OtherAppRoots(ollama=(store,), gpt4all=(tmp_path / "gpt4all",)))
    assert registry.get("x") is None


def test_a_model_made_from_an_ollama_model_follows_it_to_a_new_pull_and_goes_with_it(tmp_path, registry, starter_path):
    import shutil

    store = tmp_path / "ollama"
    roots = OtherAppRoots(ollama=(store,))
    ollama_store(store, starter_path)
    accept(registry, scan_other_apps(roots))
    base = registry.get(OLLAMA_NAME)
    registry.derive(base, "mine", {**base.origin_info, "defaults": {"temperature": 0.1}})
    # Ollama pulls the model again: a new blob, the old one deleted
    again = tmp_path / "again.gguf"
    shutil.copy(starter_path, again)
    ollama_store(store, again)
    base.path.unlink()
    refresh(registry, roots)
    mine, base = registry.get("mine"), registry.get(OLLAMA_NAME)
    assert base.path.exists() and mine.path == base.path and mine.origin_info["defaults"] == {"temperature": 0.1}
    assert mine.derived_from == OLLAMA_NAME and mine.origin == "ollama"
    registry.remove("mine", delete_files=True)  # forgotten, the file kept, and nothing for the app to forget
    assert base.path.exists() and dismissed_names(registry, "ollama") == set()
    registry.derive(base, "mine", {})
    next(store.glob("manifests/**/135m")).unlink()  # Ollama deletes the model: the one made from it goes too
    assert sorted(refresh(registry, roots).removed) == ["mine", OLLAMA_NAME]


def test_models_made_from_ollamas_wait_for_an_unplugged_store_follow_in_order_and_keep_their_names(tmp_path, registry, starter_path):
    import shutil

    store = tmp_path / "drive" / "ollama"
    roots = OtherAppRoots(ollama=(store,))
    projector = tmp_path / "p1.gguf"
    make_gguf(projector, label="Q8_0", n_floats=100)  # (a model's file stands in for its projector: only its path counts)
    ollama_store(store, starter_path, projector=projector)
    accept(registry, scan_other_apps(roots))
    base = registry.get(OLLAMA_NAME)
    registry.derive(base, "b", {**base.origin_info, "defaults": {"top_k": 3}})
    registry.derive(registry.get("b"), "c", {**registry.get("b").origin_info})
    registry.derive(base, "b", {**base.origin_info, "defaults": {"top_k": 4}})  # made again: newer than c
    # the drive is unplugged: Ollama's own entry is forgotten, the user's own models wait for it
    (tmp_path / "drive").rename(tmp_path / "away")
    assert refresh(registry, roots).removed == [OLLAMA_NAME]
    assert registry.get("b") is not None and registry.get("c") is not None
    (tmp_path / "away").rename(tmp_path / "drive")
    refresh(registry, roots)
    assert registry.get(OLLAMA_NAME) is not None and registry.get("b").origin_info["defaults"] == {"top_k": 4}
    b = registry.get("b")  # the user's own: made again under its own name, unlike Ollama's entry
    assert registry.derive(b, "b", {**b.origin_info, "defaults": {"top_k": 4}}).origin == "ollama"
    with pytest.raises(InvalidRequest, match="read in place from another app"):
        registry.derive(registry.get(OLLAMA_NAME), OLLAMA_NAME, {})
    # Ollama pulls it again with a new projector: both follow, each after the one it was made from
    again, projector2 = tmp_path / "again.gguf", tmp_path / "p2.gguf"
    shutil.copy(starter_path, again)
    make_gguf(projector2, label="Q8_0", n_floats=200)
    old = registry.get(OLLAMA_NAME)
    ollama_store(store, again, projector=projector2)
    old.path.unlink()
    old.mmproj.unlink()
    assert refresh(registry, roots).removed == [OLLAMA_NAME]  # (its old entry; registered again at once)
    new = registry.get(OLLAMA_NAME)
    for name in ("b", "c"):
        made = registry.get(name)
        assert made.path == new.path and made.mmproj == new.mmproj and made.mmproj.exists(), name
    # a model Ollama makes under a name the user made never takes it over
    ollama_store(store, again, parts=("registry.ollama.ai", "library", "b", "latest"))
    registry.derive(new, "b:latest", {})
    refresh(registry, roots)
    assert registry.get("b:latest").derived_from == OLLAMA_NAME


def test_removing_forgets_the_entry_keeps_the_file_and_stays_forgotten(tmp_path, registry, starter_path):
    store = tmp_path / "ollama"
    roots = OtherAppRoots(ollama=(store,))
    ollama_store(store, starter_path)
    accept(registry, scan_other_apps(roots))
    path = registry.get(OLLAMA_NAME).path
    registry.remove(OLLAMA_NAME, delete_files=True)  # what the API's DELETE asks for
    assert path.is_file() and os.stat(path).st_ino == os.stat(starter_path).st_ino
    assert registry.get(OLLAMA_NAME) is None
    refresh(registry, roots)
    assert registry.get(OLLAMA_NAME) is None
    # a scan the user accepts again takes it back
    accept(registry, scan_other_apps(roots))
    assert registry.get(OLLAMA_NAME) is not None


def test_an_old_registry_database_is_upgraded_in_place(tmp_path, starter_path):
    home = tmp_path / "old"
    home.mkdir()
    db = sqlite3.connect(home / "registry.db")
    db.execute(
        "CREATE TABLE models (id INTEGER PRIMARY KEY, name VARCHAR UNIQUE, repo VARCHAR, variant VARCHAR, path VARCHAR,"
        " format VARCHAR, source VARCHAR, size_bytes INTEGER, quantization VARCHAR, architecture VARCHAR,"
        " parameters INTEGER, context_length INTEGER, has_chat_template BOOLEAN, sha256 VARCHAR, added_at DATETIME)"
    )
    db.execute(
        "INSERT INTO models (name, path, format, source, size_bytes, has_chat_template, added_at)"
        " VALUES ('kept', ?, 'gguf', 'import', 1, 1, '2025-01-01 00:00:00')",
        (str(starter_path),),
    )
    db.commit()
    db.close()
    reg = ModelRegistry(home, register_starter=False)
    try:
        assert [(m.name, m.origin) for m in reg.list()] == [("kept", None)]
        store = tmp_path / "ollama"
        ollama_store(store, starter_path)
        accept(reg, scan_other_apps(OtherAppRoots(ollama=(store,))))
        assert reg.get(OLLAMA_NAME).origin == "ollama"
    finally:
        reg.close()


def test_an_ollama_model_loads_and_chats_with_its_template_through_the_api(tmp_path, registry, starter_path, monkeypatch):
    from engine.backends.options import LoadOptions
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    store = tmp_path / "ollama"
    for name in ("HOME", "OLLAMA_MODELS", "HEARTH_LMSTUDIO_MODELS", "HEARTH_JAN_MODELS", "HEARTH_GPT4ALL_MODELS", "HF_HUB_CACHE"):
        monkeypatch.setenv(name, str(tmp_path / "none" if name != "OLLAMA_MODELS" else store))
    ollama_store(store, starter_path)
    accept(registry, scan_other_apps())
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=1))
    app = create_app(ServerSettings(), manager)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as api:
            entry = {m["name"]: m for m in api.get("/api/models").json()["models"]}[OLLAMA_NAME]
            assert (entry["origin"], entry["origin_label"], entry["template_source"]) == ("ollama", "Ollama", "ollama")
            assert entry["defaults"]["system"] == SYSTEM
            body = {"model": OLLAMA_NAME, "temperature": 0, "max_tokens": 8,
                    "messages": [{"role": "user", "content": "Name three colours."}]}  # fmt: skip
            first = api.post("/v1/chat/completions", json=body)
            assert first.status_code == 200, first.text
            answer = first.json()["choices"][0]["message"]["content"]
            assert answer.strip()
            # the translated Ollama template, with Ollama's system layer as the default system message
            (lm,) = manager.loaded()
            assert lm.backend.render_chat(_messages("Name three colours.")) == EXPECTED_PROMPT
            # Ollama pulls another model: listed on the next request, no restart
            ollama_store(store, starter_path, parts=("registry.ollama.ai", "library", "smollm2", "latest"))
            names = [m["name"] for m in api.get("/api/models").json()["models"]]
            assert "smollm2:latest" in names
            # deleting through the API forgets Hearth's entry and says whose files they are
            gone = api.delete(f"/api/models/{OLLAMA_NAME}").json()
            assert gone["files_kept"] is True and "belong to Ollama" in gone["message"]
            assert Path(entry["path"]).is_file()
            assert OLLAMA_NAME not in [m["name"] for m in api.get("/api/models").json()["models"]]
    finally:
        manager.close()


def _messages(text: str):
    from engine.types import ChatMessage

    return (ChatMessage("user", text),)


def test_manifest_layers_are_read_defensively(tmp_path, starter_path):
    store = tmp_path / "ollama"
    ollama_store(store, starter_path)
    # a digest that would leave the blobs folder and a non-GGUF model layer are skipped; a manifest that is not
    # JSON and one whose model file is missing are found with the reason they cannot be used (the scan says it)
    write_manifest(store, ("registry.ollama.ai", "library", "evil", "1"),
                   [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:../../etc/passwd"}])  # fmt: skip
    blob = store / "blobs" / ("sha256-" + "1" * 64)
    blob.write_bytes(b"not a gguf")
    write_manifest(store, ("registry.ollama.ai", "library", "text", "1"),
                   [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "1" * 64}])  # fmt: skip
    broken = store / "manifests" / "registry.ollama.ai" / "library" / "broken" / "1"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    write_manifest(store, ("registry.ollama.ai", "library", "gone", "1"),
                   [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "2" * 64}])  # fmt: skip
    found = {f.name: f for f in scan_other_apps(OtherAppRoots(ollama=(store,)))}
    assert sorted(found) == ["broken:1", "gone:1", OLLAMA_NAME] and found[OLLAMA_NAME].problem is None
    assert found["broken:1"].problem == f"Its manifest {broken} is not valid JSON; `ollama pull broken:1` repairs it."
    assert found["gone:1"].problem.startswith("Its model file ") and "is missing from Ollama's store" in found["gone:1"].problem
    assert broken.read_text() == "{not json" and blob.read_bytes() == b"not a gguf"  # read, never changed


def test_the_first_run_offer_lists_what_is_new_and_accepting_registers_it_in_place(tmp_path, registry, starter_path, monkeypatch):
    from engine.backends.options import LoadOptions
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    store = tmp_path / "ollama"
    for name in ("HOME", "OLLAMA_MODELS", "HEARTH_LMSTUDIO_MODELS", "HEARTH_JAN_MODELS", "HEARTH_GPT4ALL_MODELS", "HF_HUB_CACHE"):
        monkeypatch.setenv(name, str(tmp_path / "none" if name != "OLLAMA_MODELS" else store))
    ollama_store(store, starter_path)
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=1))
    app = create_app(ServerSettings(), manager)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as api:
            offer = api.get("/api/other-apps").json()
            assert [m["name"] for m in offer["models"]] == [OLLAMA_NAME]
            size = starter_path.stat().st_size
            assert offer["total_bytes"] == size
            assert offer["summary"] == f"Found 1 model from Ollama ({size / 1e9:.1f} GB)."
            assert OLLAMA_NAME not in [m["name"] for m in api.get("/api/models").json()["models"]]  # not before a yes

            wrong = api.post("/api/other-apps/accept", json={"origins": ["steam"]})
            assert wrong.status_code == 400 and "Unknown app 'steam'" in wrong.json()["error"]["message"]
            done = api.post("/api/other-apps/accept", json={}).json()
            assert done == {"registered": [OLLAMA_NAME], "skipped": []}
            entry = {m["name"]: m for m in api.get("/api/models").json()["models"]}[OLLAMA_NAME]
            path = Path(entry["path"])
            assert entry["origin"] == "ollama" and path.parent == store / "blobs"  # in place: the blob itself
            assert path.stat().st_ino == starter_path.stat().st_ino  # the file the store links, not a copy
            assert api.get("/api/other-apps").json() == {
                "models": [], "total_bytes": 0, "summary": "No new models from other apps were found.",
            }  # fmt: skip
    finally:
        manager.close()
