"""The models Discover opens on: the curated list, labelled by the fit plan for a machine, with the
hub's details when a (fake) hub answers, and standing on its own when none does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from engine.catalog.advisor import advise
from engine.catalog.hub import check_repo_id
from engine.catalog.recommended import CATEGORIES, load_picks, ollama_library_repo, recommend
from engine.catalog.variants import group_variants, quant_label
from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo
from tests.engine.catalog.conftest import TOKEN, make_gguf
from tests.engine.catalog.test_hub import free_port
from tests.engine.fit.speed_figures import keep_figures
from tests.hubserver import FakeHub, HubFile, HubRepo

LLAMA_3B = "bartowski/Llama-3.2-3B-Instruct-GGUF"
QWEN_4B = "Qwen/Qwen3-4B-GGUF"
MISTRAL = "unsloth/Mistral-Small-3.2-24B-Instruct-2506-GGUF"
SMOL = "bartowski/Llama-3.2-1B-Instruct-GGUF"  # a small pick that runs anywhere
# The hub's exact sizes of the 3B repo's files (the curated list rounds them as the hub shows them).
LLAMA_3B_SIZES = {"Q2_K": 1_363_935_456, "Q4_K_M": 2_019_377_696, "Q5_K_M": 2_322_154_016, "Q6_K": 2_643_853_856, "Q8_0": 3_421_899_296}
LABELS = ("fits fully on GPU", "partial offload", "CPU only", "will not fit")


def machine(*, ram_gb: int, vram_gb: int = 0, apple: bool = False) -> HardwareInfo:
    gpus: tuple[GpuInfo, ...] = ()
    if apple:
        gpus = (GpuInfo(0, "Apple M3 GPU", "apple", ram_gb * GIB, unified_memory=True),)
    elif vram_gb:
        gpus = (GpuInfo(0, f"H100 {vram_gb} GB", "nvidia", vram_gb * GIB, vram_gb * GIB, "9.0", "550.54"),)
    cpu = CpuInfo("Test CPU", "arm64" if apple else "x86_64", 8, 8, ("neon",) if apple else ("avx2",))
    return HardwareInfo(os="Test", cpu=cpu, ram_total=ram_gb * GIB, ram_available=ram_gb * GIB // 2, gpus=gpus)


SMALL_RAM = machine(ram_gb=4)
BIG_GPU = machine(ram_gb=256, vram_gb=80)
MAC_64 = machine(ram_gb=64, apple=True)


def picks_hub_repos(folder) -> list[HubRepo]:
    """One of the curated repos, under its real name, with real GGUF headers of its shape."""
    files = [HubFile("README.md", b"# Llama 3.2 3B Instruct\n", lfs=False)]
    for i, (label, size) in enumerate(LLAMA_3B_SIZES.items()):
        name = f"Llama-3.2-3B-Instruct-{label}.gguf"
        data = make_gguf(folder / name, label=label, n_floats=500, seed=i, layers=28, heads=24, kv_heads=8, embd=3072, ctx=131072)
        files.append(HubFile(name, data, listed_size=size))
    return [
        HubRepo(LLAMA_3B, files, tags=["gguf", "llama"], downloads=123_456, likes=789, last_modified="2025-05-01T10:00:00.000Z")
    ]


@pytest.fixture(scope="module")
def picks_hub(tmp_path_factory):
    """A hub that has one of the curated repos; the others are not on it."""
    with FakeHub(picks_hub_repos(tmp_path_factory.mktemp("picks-hub")), token=TOKEN) as hub:
        yield hub


@pytest.fixture
def fresh_hub(picks_hub):
    picks_hub.reset()
    yield picks_hub
    picks_hub.reset()


def api_for(registry, *, endpoint: str, hardware: HardwareInfo):
    from engine.catalog.services import CatalogServices
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    manager = ModelManager(registry)
    catalog = CatalogServices(registry, endpoint=endpoint, hardware=lambda: hardware)
    return manager, catalog, create_app(ServerSettings(), manager, catalog)


@pytest.fixture
def open_api(registry):
    """Opens the worker's API with the catalog at ``endpoint`` planning for ``hardware``."""
    opened = []

    def make(endpoint: str, hardware: HardwareInfo) -> TestClient:
        manager, catalog, app = api_for(registry, endpoint=endpoint, hardware=hardware)
        client = TestClient(app, base_url="http://127.0.0.1")
        client.__enter__()
        opened.append((client, catalog, manager))
        return client

    yield make
    for client, catalog, manager in opened:
        client.__exit__(None, None, None)
        catalog.close()
        manager.close()


def by_repo(body: dict) -> dict[str, dict]:
    return {m["repo"]: m for m in body["models"]}


# -- the curated list -------------------------------------------------------------------------


def test_the_list_names_real_repos_and_files_hearth_can_group():
    picks = load_picks()
    assert 10 <= len(picks.picks) <= 24
    assert {p.category for p in picks.picks} == set(CATEGORIES)
    assert len({p.repo for p in picks.picks}) == len(picks.picks)
    for p in picks.picks:
        check_repo_id(p.repo)
        assert p.description.endswith(".") and "\n" not in p.description
        assert p.shape.layers > 0 and p.shape.parameters
        # each file name carries its quantization, so the hub's listing groups it into the same variant
        for v in p.variants:
            assert quant_label(v.primary.path) == v.name, v.primary.path
            assert v.size_bytes > 0
        grouped = group_variants(p.repo, [f for v in p.variants for f in v.files])
        assert sorted(v.name for v in grouped) == sorted(v.name for v in p.variants)


def test_a_small_ram_machine_gets_cpu_labels_and_the_big_models_will_not_fit():
    listing = recommend(load_picks(), SMALL_RAM)
    entries = {e.pick.repo: e for e in listing.entries}
    smol = entries[SMOL]
    assert smol.suggested is not None and smol.label == "CPU only"
    mistral = entries[MISTRAL]
    assert mistral.suggested is None and mistral.label == "will not fit"
    assert "try a smaller model" in mistral.advice.reason
    # the same plan the variants view makes: the advisor's own labels, variant by variant
    direct = advise(mistral.pick.variants, mistral.pick.shape, SMALL_RAM)
    assert [e.label for e in mistral.advice.estimates] == [e.label for e in direct.estimates]
    assert not listing.asked_hub and listing.hub_error is None


def test_a_large_gpu_runs_every_pick_on_the_gpu_at_its_best_quality():
    listing = recommend(load_picks(), BIG_GPU, gpu_offload_supported=True)
    assert {e.label for e in listing.entries} == {"fits fully on GPU"}
    mistral = next(e for e in listing.entries if e.pick.repo == MISTRAL)
    assert mistral.suggested == "Q8_0"
    small = next(e for e in recommend(load_picks(), SMALL_RAM).entries if e.pick.repo == MISTRAL)
    assert small.to_dict()["label"] != mistral.to_dict()["label"]


# -- the worker's route -----------------------------------------------------------------------


def test_the_route_adds_the_hubs_details_where_the_hub_has_the_repo(open_api, fresh_hub):
    api = open_api(fresh_hub.url, SMALL_RAM)
    r = api.get("/api/hub/recommended")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["asked_hub"] and body["live"] and body["hub_error"] is None
    models = by_repo(body)
    assert len(models) == len(load_picks().picks)
    llama = models[LLAMA_3B]
    assert (llama["downloads"], llama["likes"]) == (123_456, 789)
    assert llama["updated"].startswith("2025-05-01")
    # the hub's exact sizes, for the curated variants only (its Q2_K is not offered)
    assert {v["name"]: v["size_bytes"] for v in llama["variants"]} == {k: s for k, s in LLAMA_3B_SIZES.items() if k != "Q2_K"}
    assert llama["size_bytes"] == LLAMA_3B_SIZES[llama["variant"]]
    # a repo the hub does not have stays in the list, labelled from the curated data
    qwen = models[QWEN_4B]
    assert qwen["live"] is False and qwen["downloads"] is None
    assert qwen["label"].startswith(LABELS) and qwen["size_bytes"] > 0
    assert {c["id"] for c in body["categories"]} == set(CATEGORIES)


def test_offline_the_route_never_asks_the_hub(open_api, fresh_hub):
    api = open_api(fresh_hub.url, SMALL_RAM)
    body = api.get("/api/hub/recommended", params={"live": "false"}).json()
    assert not body["asked_hub"] and not body["live"]
    assert fresh_hub.requests == []
    assert all(m["label"].startswith(LABELS) for m in body["models"])


def test_with_the_hub_unreachable_the_list_stands_and_says_why(open_api):
    api = open_api(f"http://127.0.0.1:{free_port()}", SMALL_RAM)
    r = api.get("/api/hub/recommended")
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["models"]) == len(load_picks().picks) and not body["live"]
    assert "try again" in body["hub_error"] and body["hub_error"].endswith(".")
    models = by_repo(body)
    assert models[SMOL]["label"] == "CPU only" and models[SMOL]["suggested"]
    assert models[MISTRAL]["label"] == "will not fit" and models[MISTRAL]["suggested"] is None


def test_the_list_and_the_variants_view_give_one_label_per_variant(open_api, fresh_hub):
    api = open_api(fresh_hub.url, MAC_64)
    llama = by_repo(api.get("/api/hub/recommended").json())[LLAMA_3B]
    variants = {v["name"]: v for v in api.get("/api/hub/variants", params={"repo": LLAMA_3B}).json()["variants"]}
    for v in llama["variants"]:
        assert v["label"] == variants[v["name"]]["label"] == "fits fully on GPU"
    assert llama["suggested"] == "Q8_0"
    small = by_repo(open_api(fresh_hub.url, SMALL_RAM).get("/api/hub/recommended").json())[LLAMA_3B]
    assert small["label"] == "CPU only"


def test_a_too_short_context_is_refused(open_api, fresh_hub):
    r = open_api(fresh_hub.url, SMALL_RAM).get("/api/hub/recommended", params={"ctx": 10, "live": "false"})
    assert r.status_code == 400
    assert "256" in r.json()["error"]["message"]


# -- hearth search --recommended --------------------------------------------------------------


def hearth(endpoint: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(HF_ENDPOINT=endpoint, HEARTH_HOME=str(keep_figures(tmp_path / "home")), HF_HUB_DISABLE_IMPLICIT_TOKEN="1")
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env, timeout=120)


def test_cli_json_has_the_same_entries_with_the_hubs_details(fresh_hub, tmp_path):
    out = hearth(fresh_hub.url, tmp_path, "search", "--recommended", "--json")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    models = by_repo(body)
    assert len(models) == len(load_picks().picks)
    assert models[LLAMA_3B]["downloads"] == 123_456 and models[LLAMA_3B]["live"]
    assert all(m["label"].startswith(LABELS) for m in body["models"])
    assert all(m["suggested"] in (None, *[v["name"] for v in m["variants"]]) for m in body["models"])


def test_cli_text_offline_groups_the_list_and_says_the_hub_is_missing(tmp_path):
    out = hearth(f"http://127.0.0.1:{free_port()}", tmp_path, "search", "--recommended")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for title in ("Chat", "Coding", "Reasoning", "Vision", "Embedding"):
        assert f"\n{title}\n" in text
    assert text.index(SMOL) < text.index("\nCoding\n") < text.index("Qwen2.5-Coder-7B")
    assert any(label in text for label in LABELS)
    # each suggestion says how fast it runs here (the data folder holds this machine's figures: nothing is measured)
    assert re.search(r"\d[\d.]* GB  CPU only \([\d.]+ GB in memory\), about [\d.]+ tok/s", text), text
    assert "the hub's details are missing" in text and "hearth pull " in text
    both = hearth(f"http://127.0.0.1:{free_port()}", tmp_path, "search", "llama", "--recommended")
    assert both.returncode == 1 and both.stderr.strip() == "hearth: Give either words to search for or --recommended, not both."


def test_the_first_list_on_a_machine_waits_for_its_speed_figures(open_api, monkeypatch, tmp_path):
    """A machine not measured yet (a fresh install, or new hardware) is measured when Discover first asks, and the
    answer waits for it: a list without speeds would suggest the largest variants that fit, however slow."""
    import time

    import engine.fit.probe as probe
    from engine.hardware import detect_hardware
    from tests.engine.fit.speed_figures import machine_figures

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "fresh-home"))
    here = detect_hardware()
    assert probe.load_cached(here.identity) is None
    measured = []

    def measure(hardware, **_):  # the probe's seconds, then its figures kept as the real one keeps them
        time.sleep(0.5)
        figures = machine_figures(hardware.identity, gpus=len(hardware.gpus))
        probe.save(figures)
        measured.append(hardware.identity)
        return figures

    monkeypatch.setattr(probe, "machine_speed", measure)
    api = open_api(f"http://127.0.0.1:{free_port()}", here)
    body = api.get("/api/hub/recommended", params={"live": "false"}).json()
    assert measured == [here.identity]
    suggested = [m for m in body["models"] if m["suggested"]]
    assert suggested and all(m["speed"].startswith("about ") for m in suggested), suggested
    again = api.get("/api/hub/recommended", params={"live": "false"}).json()
    assert measured == [here.identity] and again["models"] == body["models"]  # measured once, then kept


def test_a_probe_that_breaks_leaves_the_list_without_speeds(open_api, monkeypatch, tmp_path):
    import engine.fit.probe as probe
    from engine.hardware import detect_hardware

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "fresh-home"))

    def broken(hardware, **_):
        raise RuntimeError("llama.cpp could not load the probe model")

    monkeypatch.setattr(probe, "machine_speed", broken)
    r = open_api(f"http://127.0.0.1:{free_port()}", detect_hardware()).get("/api/hub/recommended", params={"live": "false"})
    assert r.status_code == 200, r.text
    assert all(m["speed"] == "" for m in r.json()["models"])  # judged by fit alone, as before any figures


def test_a_mixture_of_experts_says_so_where_a_dense_model_says_nothing():
    """The Hardware page's "runs models up to about N B parameters well" leaves out a mixture of experts."""
    models = {m["repo"]: m for m in recommend(load_picks(), machine(ram_gb=32)).to_dict()["models"]}
    assert models["unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF"]["experts"] == 128
    assert models["bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"]["experts"] is None


def test_names_of_ollamas_library_find_the_listed_repo_and_the_tags_quantization():
    picks = load_picks()
    named = [n for p in picks.picks for n in p.ollama]
    assert len(named) == len(set(named)) and all(n == n.lower() and "/" not in n for n in named)  # each name one model
    llama = "bartowski/Llama-3.2-3B-Instruct-GGUF"
    assert ollama_library_repo("llama3.2") == ollama_library_repo("llama3.2:latest") == (llama, None)
    assert ollama_library_repo("Llama3.2:3B") == (llama, None)  # as Ollama, in any case
    assert ollama_library_repo("registry.ollama.ai/library/llama3.2:3b-instruct-q8_0") == (llama, "Q8_0")
    assert ollama_library_repo("qwen3:8b-fp16") == ("Qwen/Qwen3-8B-GGUF", "F16")
    assert ollama_library_repo("gemma3:4b-it-q4_K_M") == ("ggml-org/gemma-3-4b-it-GGUF", "Q4_K_M")
    assert ollama_library_repo("llama3.2:1b") == ("bartowski/Llama-3.2-1B-Instruct-GGUF", None)
    for other in ("llama3.2:3b-text-q4_K_M", "qwen3:30b", "mistral", "hf.co/owner/repo", "acme/llama3.2", "", ":3b"):
        assert ollama_library_repo(other) is None, other  # a base model, a size or a model not listed, a Hub repo
    every = {pick.repo for pick in picks.picks if pick.ollama}
    assert {ollama_library_repo(n, picks)[0] for p in picks.picks for n in p.ollama} == every  # type: ignore[index]
