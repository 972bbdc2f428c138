"""The advisor's labels for one repo on four machines, and its estimate against a real load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.catalog.advisor import Fit, advise, estimate_memory
from engine.catalog.metadata import read_model_metadata
from engine.catalog.shape import shape_from_metadata
from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo
from tests.engine.catalog.conftest import BIG, MLX_BIG, ST_BIG


def machine(*, ram_gb: int, vram_gb: int = 0, apple: bool = False) -> HardwareInfo:
    gpus: tuple[GpuInfo, ...] = ()
    if apple:
        gpus = (GpuInfo(0, "Apple M2 GPU", "apple", ram_gb * GIB, unified_memory=True),)
    elif vram_gb:
        gpus = (GpuInfo(0, f"GeForce {vram_gb} GB", "nvidia", vram_gb * GIB, vram_gb * GIB, "8.9", "550.54"),)
    cpu = CpuInfo("Test CPU", "arm64" if apple else "x86_64", 8, 8, ("neon",) if apple else ("avx2",))
    return HardwareInfo(os="Test", cpu=cpu, ram_total=ram_gb * GIB, ram_available=ram_gb * GIB // 2, gpus=gpus)


GPU_24 = machine(ram_gb=64, vram_gb=24)
GPU_8 = machine(ram_gb=32, vram_gb=8)
MAC_16 = machine(ram_gb=16, apple=True)
CPU_16 = machine(ram_gb=16)


@pytest.fixture
def big(client):
    listing = client.repo(BIG)
    return listing, client.model_shape(listing)


def labels(advice) -> dict[str, str]:
    return {e.variant: e.label for e in advice.estimates}


def test_the_shape_comes_from_the_remote_gguf_header(big, hub):
    listing, shape = big
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.context_length) == (32, 8, 128, 8192)
    assert shape.source == "the GGUF header" and shape.parameters == 8_030_261_248
    (rng,) = hub.ranges("Big-Llama-8B.Q2_K.gguf")
    assert rng is not None and rng.startswith("bytes=0-")


def test_a_24_gb_gpu_runs_every_variant_and_takes_f16(big):
    listing, shape = big
    advice = advise(listing.variants, shape, GPU_24, gpu_offload_supported=True)
    assert set(labels(advice).values()) == {"fits fully on GPU"}
    assert advice.recommended == "F16"
    assert advice.reason.startswith("F16 is the highest-quality variant that fits fully on the GeForce 24 GB")


def test_an_8_gb_gpu_offloads_the_big_variants_in_part(big):
    listing, shape = big
    advice = advise(listing.variants, shape, GPU_8, gpu_offload_supported=True)
    fits = {e.variant: e for e in advice.estimates}
    # Q6_K's token embeddings (0.4 GB) stay in RAM, as llama.cpp keeps them: its layers fit in 8 GB
    assert [v for v, e in fits.items() if e.fit is Fit.GPU] == ["Q2_K", "Q4_K_M", "Q5_K_M", "Q6_K"]
    assert [v for v, e in fits.items() if e.fit is Fit.PARTIAL] == ["Q8_0", "F16"]
    layers = [fits[v].gpu_layers for v in ("Q8_0", "F16")]
    assert layers == sorted(layers, reverse=True) and 0 < layers[-1] < layers[0] < 32
    assert fits["F16"].label == f"partial offload ({fits['F16'].gpu_layers} of 32 layers)"
    assert advice.recommended == "Q6_K"


def test_a_16_gb_mac_counts_unified_memory_as_gpu(big):
    listing, shape = big
    advice = advise(listing.variants, shape, MAC_16)
    assert labels(advice) == {
        "Q2_K": "fits fully on GPU",
        "Q4_K_M": "fits fully on GPU",
        "Q5_K_M": "fits fully on GPU",
        "Q6_K": "fits fully on GPU",
        "Q8_0": "fits fully on GPU",
        "F16": "will not fit",
    }
    assert advice.recommended == "Q8_0"


def test_a_16_gb_machine_without_gpu_runs_on_the_cpu(big):
    listing, shape = big
    advice = advise(listing.variants, shape, CPU_16)
    assert labels(advice) == {
        "Q2_K": "CPU only",
        "Q4_K_M": "CPU only",
        "Q5_K_M": "CPU only",
        "Q6_K": "CPU only",
        "Q8_0": "CPU only",
        "F16": "will not fit",
    }
    assert advice.recommended == "Q8_0"
    assert "runs on the CPU" in advice.reason


def test_a_gpu_that_llama_cpp_cannot_use_means_cpu_only(big):
    listing, shape = big
    advice = advise(listing.variants, shape, GPU_8, gpu_offload_supported=False)
    est = advice.get("Q4_K_M")
    assert est.fit is Fit.CPU and "no GPU support" in est.reason


def test_split_parts_are_summed_and_the_kv_cache_follows_the_context(big):
    listing, shape = big
    q6 = listing.variant("Q6_K")
    assert q6.parts == 2 and q6.weights_bytes == 6_600_000_000
    short = advise(listing.variants, shape, GPU_24, context_length=4096, gpu_offload_supported=True).get("Q6_K")
    long = advise(listing.variants, shape, GPU_24, context_length=32768, gpu_offload_supported=True).get("Q6_K")
    assert short.memory.weights == 6_600_000_000
    assert long.memory.kv_cache - short.memory.kv_cache == 32 * 8 * 128 * 2 * 2 * (32768 - 4096)


def test_nothing_fits_says_what_to_do(big):
    listing, shape = big
    tiny = machine(ram_gb=2)
    advice = advise(listing.variants, shape, tiny)
    assert advice.recommended is None and set(labels(advice).values()) == {"will not fit"}
    assert "try a smaller model" in advice.reason


def test_mlx_and_safetensors_repos_on_the_four_machines(client):
    mlx = client.repo(MLX_BIG)
    st = client.repo(ST_BIG)
    mlx_shape, st_shape = client.model_shape(mlx), client.model_shape(st)
    assert mlx_shape.source == "the repo's config.json" and mlx_shape.layers == 32
    expect_mlx = {GPU_24: "CPU only", GPU_8: "CPU only", MAC_16: "fits fully on GPU", CPU_16: "CPU only"}
    expect_st = {GPU_24: "fits fully on GPU", GPU_8: "CPU only", MAC_16: "will not fit", CPU_16: "will not fit"}
    for hw, label in expect_mlx.items():
        assert advise(mlx.variants, mlx_shape, hw).get("4bit").label == label
    for hw, label in expect_st.items():
        assert advise(st.variants, st_shape, hw).get("BF16").label == label


MEASURE = """
import gc, json, sys, psutil
import llama_cpp
from engine.backends.base import LoadOptions, ModelSpec
from engine.backends.llamacpp import LlamaCppBackend
from engine.starter import starter_model_path
from engine.types import GenerationRequest, SamplingParams
n_ctx = int(sys.argv[1])
proc = psutil.Process()
gc.collect()
before = proc.memory_info().rss
backend = LlamaCppBackend()
backend.load(ModelSpec(name="starter", path=starter_model_path()), LoadOptions(n_ctx=n_ctx, n_seq_max=1))
request = GenerationRequest(model="starter", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=4))
for _ in backend.stream(request):
    pass
print(json.dumps({"used": proc.memory_info().rss - before}))
backend.close()
"""


@pytest.mark.parametrize("n_ctx", [2048, 8192])
def test_the_estimate_matches_the_memory_the_starter_model_really_takes(starter_path, n_ctx):
    out = subprocess.run([sys.executable, "-c", MEASURE, str(n_ctx)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    used = json.loads(out.stdout.strip().splitlines()[-1])["used"]
    meta = read_model_metadata(starter_path)
    estimate = estimate_memory(meta.size_bytes, shape_from_metadata(meta), context_length=n_ctx)
    assert abs(estimate.total - used) / used <= 0.25, (estimate, used)
