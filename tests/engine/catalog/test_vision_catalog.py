"""Models that see, in the catalog: a hub repo with mmproj projectors is marked as seeing, pulling a variant
also pulls its projector (F16 unless another is picked; resumed and verified as the model is), the registry
records the pair, and the pulled model answers a picture. Importing pairs a projector lying beside a model.

The hub repo holds the tiny vision model of tests/engine/server/tiny_vision.py and two projectors: its vision
one as F16, and its audio one under a BF16 label, so that which one was pulled shows in what the model takes in.
"""

from __future__ import annotations

import shutil

import pytest

from engine.errors import InvalidRequest
from tests.engine.server import tiny_vision
from tests.hubserver import FakeHub, HubFile, HubRepo

REPO = "TheOrg/Tiny-Vision-GGUF"
TEXT_REPO = "TheOrg/Tiny-Text-GGUF"
MODEL_FILE = "tiny-vision-Q8_0.gguf"
F16 = "mmproj-tiny-vision-F16.gguf"
BF16 = "mmproj-tiny-audio-BF16.gguf"


@pytest.fixture(scope="module")
def vision_hub():
    files = [
        HubFile("README.md", b"# Tiny Vision\n", lfs=False),
        HubFile(MODEL_FILE, tiny_vision.MODEL_PATH.read_bytes()),
        HubFile(F16, tiny_vision.MMPROJ_PATH.read_bytes()),
        HubFile(BF16, tiny_vision.AUDIO_MMPROJ_PATH.read_bytes()),
    ]
    text = [HubFile("tiny-text-Q8_0.gguf", tiny_vision.MODEL_PATH.read_bytes())]
    repos = [
        HubRepo(REPO, files, tags=["gguf", "image-text-to-text"], downloads=20, likes=2),
        HubRepo(TEXT_REPO, text, tags=["gguf", "text-generation"], downloads=10, likes=1),
    ]
    with FakeHub(repos) as hub:
        yield hub


@pytest.fixture
def hub_client(vision_hub):
    from engine.catalog.hub import HubClient

    vision_hub.reset()
    return HubClient(endpoint=vision_hub.url, token=None, timeout=5)


@pytest.fixture
def manager(registry, hub_client):
    from engine.catalog.downloads import DownloadManager

    m = DownloadManager(registry, hub=hub_client, retry_wait=0.01, disk_free=lambda _: 1 << 40)
    yield m
    m.close()


def _pull(manager, variant=None, **kw):
    job = manager.start(REPO, variant, **kw)
    status = job.wait(60)
    assert status.state.value == "completed", status.error
    return job.model, status


def test_search_and_listing_mark_a_repo_with_projectors_as_seeing(hub_client):
    found = {r.repo: r for r in hub_client.search("tiny")}
    assert found[REPO].vision and not found[TEXT_REPO].vision
    assert found[REPO].variants == ("Q8_0",)  # the projectors are not variants
    listing = hub_client.repo(REPO)
    (variant,) = listing.variants
    assert listing.vision and variant.vision and variant.projector.path == F16
    assert [p["label"] for p in listing.to_dict()["projectors"]] == ["F16", "BF16"]
    assert variant.to_dict()["projector"]["path"] == F16
    assert not hub_client.repo(TEXT_REPO).variants[0].vision
    facts = hub_client.projector_facts(listing)  # from the projector's remote header: its encoder's sizes
    assert facts.source == "the projector's header" and facts.vision and facts.weights_bytes == variant.projector.size
    assert hub_client.projector_facts(hub_client.repo(TEXT_REPO)) is None


def test_pulling_gets_the_model_and_the_f16_projector_and_the_model_sees(manager, vision_hub):
    from engine.backends.base import LoadOptions
    from engine.backends.llamacpp import LlamaCppBackend
    from engine.catalog.pairing import projector_senses
    from engine.types import MEDIA_MARKER, ChatMessage, GenerationRequest, MediaInput, SamplingParams
    from tests.engine.server.vision_fixtures import QUESTION, checkerboard, gradient

    model, status = _pull(manager)
    assert model.name == f"{REPO}:Q8_0" and model.path.name == MODEL_FILE
    assert model.mmproj is not None and model.mmproj.name == F16 and model.mmproj.parent == model.path.parent
    assert model.mmproj.read_bytes() == tiny_vision.MMPROJ_PATH.read_bytes()
    assert status.files_total == 2 and status.bytes_total == model.size_bytes + model.mmproj.stat().st_size
    assert not vision_hub.file_requests(BF16) and not (model.path.parent / BF16).exists()
    assert projector_senses(model.mmproj) == ["vision"]

    backend = LlamaCppBackend()
    backend.load(model.spec, LoadOptions(n_ctx=512, n_seq_max=1, n_threads=1))
    try:
        assert backend.info.vision

        def answer(picture: bytes) -> list[int]:
            message = ChatMessage("user", QUESTION + MEDIA_MARKER, media=(MediaInput("image", picture, "image"),))
            req = GenerationRequest(model=model.name, messages=(message,), params=SamplingParams(temperature=0, max_tokens=8))
            chunks = list(backend.stream(req))
            assert chunks[-1].finish_reason in ("stop", "length"), chunks[-1].error
            return [t for c in chunks for t in c.token_ids]

        assert answer(checkerboard()) != answer(gradient())  # it sees the picture
    finally:
        backend.close()


def test_another_projector_or_none_can_be_picked(manager, registry):
    from engine.catalog.pairing import projector_senses

    model, _ = _pull(manager, "Q8_0", projector="bf16")
    assert model.mmproj.name == BF16 and projector_senses(model.mmproj) == ["audio"]
    registry.remove(model.name, delete_files=True)
    assert not model.mmproj.exists()
    model, status = _pull(manager, projector="none")
    assert model.mmproj is None and status.files_total == 1
    with pytest.raises(InvalidRequest, match="choose one of: F16, BF16"):
        manager.start(REPO, projector="Q4_0")


def test_the_projector_resumes_after_a_dropped_connection_and_is_verified(manager, vision_hub):
    vision_hub.drop_after[F16] = 20_000
    model, _ = _pull(manager)
    assert model.mmproj.read_bytes() == tiny_vision.MMPROJ_PATH.read_bytes()
    assert vision_hub.ranges(F16)[-1] == "bytes=20000-"  # the second request went on from where the first stopped
    manager.registry.remove(model.name, delete_files=True)
    vision_hub.reset()
    vision_hub.corrupt.add(F16)
    job = manager.start(REPO)
    status = job.wait(60)
    assert status.state.value == "failed" and F16 in status.error and "sha256" in status.error
    assert manager.registry.get(f"{REPO}:Q8_0") is None  # nothing registered without its projector


def test_a_projector_another_variant_uses_stays_when_one_is_removed(manager, registry):
    model, _ = _pull(manager)
    other = registry.register(model.path, name="same-files", origin_info={"mmproj": str(model.mmproj)})
    registry.remove(model.name)  # forgotten only: the files stay
    assert other.mmproj.exists()


# -- import ---------------------------------------------------------------------------------------------


@pytest.fixture
def lmstudio_folder(tmp_path):
    """``publisher/repo/`` with the model and its projector side by side, as LM Studio keeps them."""
    folder = tmp_path / "lmstudio" / "TheOrg" / "Tiny-Vision-GGUF"
    folder.mkdir(parents=True)
    shutil.copy(tiny_vision.MODEL_PATH, folder / MODEL_FILE)
    shutil.copy(tiny_vision.MMPROJ_PATH, folder / "mmproj-tiny-vision-f16.gguf")
    return folder


def test_import_pairs_the_projector_beside_the_model(registry, lmstudio_folder, tmp_path):
    from engine.catalog.pairing import import_model

    model = import_model(registry, lmstudio_folder / MODEL_FILE)
    assert model.mmproj == (lmstudio_folder / "mmproj-tiny-vision-f16.gguf").resolve()
    assert registry.get(model.name).spec.mmproj == model.mmproj
    alone = import_model(registry, lmstudio_folder / MODEL_FILE, name="alone", pair=False)
    assert alone.mmproj is None
    named = import_model(registry, lmstudio_folder / MODEL_FILE, name="hears", mmproj=tiny_vision.AUDIO_MMPROJ_PATH)
    assert named.mmproj == tiny_vision.AUDIO_MMPROJ_PATH.resolve()


def test_import_refuses_a_projector_that_is_not_one_and_a_projector_as_the_model(registry, lmstudio_folder, tmp_path):
    from engine.catalog.pairing import import_model

    with pytest.raises(InvalidRequest, match="is a model, not a multimodal projector") as exc:
        import_model(registry, lmstudio_folder / MODEL_FILE, mmproj=tiny_vision.MODEL_PATH)
    assert exc.value.param == "mmproj"
    with pytest.raises(InvalidRequest, match="no projector file at"):
        import_model(registry, lmstudio_folder / MODEL_FILE, mmproj=tmp_path / "missing.gguf")
    with pytest.raises(InvalidRequest, match="is a multimodal projector, not a model"):
        import_model(registry, lmstudio_folder / "mmproj-tiny-vision-f16.gguf")
    assert registry.list() == []


# -- the admin API ------------------------------------------------------------------------------------


@pytest.fixture
def api(vision_hub, registry):
    from fastapi.testclient import TestClient

    from engine.catalog.services import CatalogServices
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    vision_hub.reset()
    manager = ModelManager(registry)
    catalog = CatalogServices(registry, endpoint=vision_hub.url)
    with TestClient(create_app(ServerSettings(), manager, catalog), base_url="http://127.0.0.1") as client:
        yield client
    catalog.close()
    manager.close()


def test_the_api_marks_seeing_repos_pulls_a_picked_projector_and_imports_a_pair(api, lmstudio_folder):
    import time

    (hit,) = [r for r in api.get("/api/hub/search", params={"q": "vision"}).json()["results"] if r["repo"] == REPO]
    assert hit["vision"] is True
    body = api.get("/api/hub/variants", params={"repo": REPO}).json()
    assert body["vision"] and [p["label"] for p in body["projectors"]] == ["F16", "BF16"]
    assert body["variants"][0]["vision"] and body["variants"][0]["projector"]["path"] == F16
    assert body["variants"][0]["plan"]["projector_bytes"] > body["variants"][0]["projector"]["size"]  # and its encoder
    bad = api.post("/api/downloads", json={"repo": REPO, "mmproj_variant": "Q4_0"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "mmproj_variant"
    job = api.post("/api/downloads", json={"repo": REPO, "mmproj_variant": "BF16"}).json()
    deadline = time.monotonic() + 60
    while job["state"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.05)
        job = next(d for d in api.get("/api/downloads").json()["downloads"] if d["id"] == job["id"])
    assert job["state"] == "done" and job["files_total"] == 2, job
    (entry,) = [m for m in api.get("/api/models").json()["models"] if m["name"] == f"{REPO}:Q8_0"]
    assert entry["mmproj"].endswith(BF16)
    (listed,) = [m for m in api.get("/v1/models").json()["data"] if m["id"] == f"{REPO}:Q8_0"]
    assert listed["capabilities"] == ["audio"]  # the projector picked hears

    imported = api.post("/api/models/import", json={"path": str(lmstudio_folder / MODEL_FILE), "name": "eyes"})
    assert imported.status_code == 200, imported.text
    assert imported.json()["mmproj"] == str((lmstudio_folder / "mmproj-tiny-vision-f16.gguf").resolve())
    named = api.post("/api/models/import", json={"path": str(lmstudio_folder / MODEL_FILE), "name": "x", "mmproj": str(lmstudio_folder / MODEL_FILE)})
    assert named.status_code == 400 and named.json()["error"]["param"] == "mmproj"
