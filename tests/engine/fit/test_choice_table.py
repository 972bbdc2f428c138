"""The advisor's choice on thirteen machine classes for four popular GGUF repos (their real quant
sizes, listed by a fake Hub and read by the real Hub client), and the same table in docs/fit.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.catalog.advisor import Fit, advise
from engine.hardware import GIB
from tests.engine.fit.popular import MACHINES, REPOS, hub_repos, machine, table
from tests.hubserver import FakeHub

DOCS = Path(__file__).resolve().parents[3] / "docs" / "fit.md"
LLAMA_8B, QWEN_14B, QWEN_32B, LLAMA_70B = REPOS
ORDER = {Fit.GPU: 3, Fit.PARTIAL: 2, Fit.CPU: 1, Fit.NONE: 0}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from engine.catalog.hub import HubClient

    with FakeHub(hub_repos(tmp_path_factory.mktemp("popular"))) as hub:
        yield HubClient(endpoint=hub.url, token=None, timeout=5)


@pytest.fixture(scope="module")
def listings(client):
    out = {}
    for repo in REPOS:
        listing = client.repo(repo)
        out[repo] = (listing, client.model_shape(listing))
    return out


def test_the_shapes_and_sizes_come_from_the_hub(listings):
    listing, shape = listings[QWEN_32B]
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.vocab) == (64, 8, 128, 152_064)
    assert shape.source == "the GGUF header"
    assert listing.variant("Q8_0").parts == 2 and listing.variant("Q8_0").weights_bytes == 34_820_000_000
    assert [v.name for v in listings[LLAMA_70B][0].variants][-1] == "F16"


@pytest.mark.parametrize("ctx", [4096, 32768])
def test_docs_fit_md_shows_what_the_advisor_recommends(listings, ctx):
    docs = DOCS.read_text()
    section = docs.split(f"### {ctx:,} tokens of context", 1)[1].split("###", 1)[0]
    for row in table(listings, ctx):
        assert row in section, f"docs/fit.md is out of date at {ctx} tokens: {row}"


@pytest.mark.parametrize("name", list(MACHINES))
def test_the_recommended_variant_fits_with_headroom_and_nothing_better_does(listings, name):
    hw = MACHINES[name]
    for ctx in (4096, 32768):
        for repo, (listing, shape) in listings.items():
            advice = advise(listing.variants, shape, hw, context_length=ctx, gpu_offload_supported=True)
            if advice.recommended is None:
                assert {e.fit for e in advice.estimates} == {Fit.NONE}, (name, repo, ctx)
                continue
            rec = advice.get(advice.recommended)
            assert rec.fit is not Fit.NONE and rec.plan.fits
            for d in rec.plan.devices:  # every device within its usable share, which keeps headroom
                assert d.memory.total <= d.usable
            gpu = hw.best_gpu
            if gpu is not None and not gpu.unified_memory:
                assert all(d.usable <= gpu.memory_total - GIB for d in rec.plan.devices if d.device != "cpu")
            assert rec.plan.memory.weights + rec.plan.memory.kv_cache <= sum(d.usable for d in rec.plan.devices)
            better_place = [e.variant for e in advice.estimates if ORDER[e.fit] > ORDER[rec.fit]]
            assert not better_place, (name, repo, ctx, rec.variant, better_place)
            if rec.fit in (Fit.GPU, Fit.CPU):
                for e in advice.estimates:
                    if e.fit is rec.fit and e.quality > rec.quality:  # only a 4-bit KV cache keeps it out
                        assert e.plan.kv_type == "q4_0" and rec.plan.kv_type != "q4_0", (name, repo, ctx, e.variant)


def test_the_label_and_the_choice_move_with_the_context(listings):
    listing, shape = listings[LLAMA_8B]
    hw = MACHINES["NVIDIA 24 GB"]
    contexts = (4096, 32768, 65536, 131072)
    advice = [advise(listing.variants, shape, hw, context_length=c, gpu_offload_supported=True) for c in contexts]
    f16 = [a.get("F16") for a in advice]
    assert f16[0].label == "fits fully on GPU" and f16[-1].fit is not Fit.GPU
    assert [ORDER[e.fit] for e in f16] == sorted((ORDER[e.fit] for e in f16), reverse=True)
    quality = [a.get(a.recommended).quality for a in advice]
    assert quality == sorted(quality, reverse=True) and quality[-1] < quality[0]
    assert [a.get(a.recommended).plan.n_ctx for a in advice] == list(contexts)


def test_an_8_bit_kv_cache_is_the_lever_at_long_context(listings):
    listing, shape = listings[LLAMA_8B]
    advice = advise(listing.variants, shape, MACHINES["CPU 8 GB"], context_length=32768)
    rec = advice.get(advice.recommended)
    assert rec.plan.kv_type == "q8_0" and rec.fit is Fit.CPU
    assert rec.reason.startswith("It fits at 32,768 tokens with an 8-bit KV cache.")
    short = advise(listing.variants, shape, MACHINES["CPU 8 GB"], context_length=4096)
    assert short.get(short.recommended).plan.kv_type == "f16"  # not taken where a 16-bit cache fits


def test_two_gpus_are_counted_each_on_its_own(listings):
    listing, shape = listings[LLAMA_70B]
    one = machine("1x24", ram_gb=128, vram_gb=24)
    two = machine("2x24", ram_gb=128, vram_gb=24, gpus=2)
    single = advise(listing.variants, shape, one, gpu_offload_supported=True).get("Q4_K_M")
    double = advise(listing.variants, shape, two, gpu_offload_supported=True).get("Q4_K_M")
    assert single.fit is Fit.PARTIAL
    assert double.fit is Fit.GPU and "NVIDIA 24 GB and NVIDIA 24 GB" in double.reason
    gpus = [d for d in double.plan.devices if d.device != "cpu"]
    assert [d.device for d in gpus] == ["gpu0", "gpu1"] and sum(d.layers for d in gpus) == 80
    assert all(d.layers > 30 and d.memory.total <= d.usable for d in gpus)
    assert double.plan.tensor_split == tuple(float(d.layers) for d in gpus)


def test_hearth_fit_on_a_hub_variant_is_the_advisors_plan(client, listings):
    from engine.fit.report import fit_model

    hw = MACHINES["NVIDIA 12 GB"]
    report = fit_model(f"{QWEN_14B}:Q4_K_M", hw, hub=client, n_ctx=8192)
    listing, shape = listings[QWEN_14B]
    est = advise(listing.variants, shape, hw, context_length=8192).get("Q4_K_M")
    assert report.source == "hub" and report.variant == "Q4_K_M" and report.label == est.label
    assert report.plan == est.plan and report.plan.n_ctx == 8192
    assert report.facts.weights_bytes == 8_988_110_080
    recommended = fit_model(QWEN_14B, hw, hub=client)
    assert recommended.variant == advise(listing.variants, shape, hw).recommended
