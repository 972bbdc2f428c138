"""The advisor knows MoE: a Qwen3-30B-A3B-shaped variant too big for a 16 GB GPU whole, but whose attention and
shared weights fit with the experts of some layers in RAM, is labelled "fits with experts on the CPU"."""

from __future__ import annotations

from engine.catalog.advisor import Fit, estimate_fit
from engine.catalog.shape import ModelShape, shape_from_config, shape_from_gguf_kv
from engine.catalog.variants import RemoteFile, Variant
from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo

# Qwen3-30B-A3B's shape, as its GGUF header gives it
KV = {
    "general.architecture": "qwen3moe", "qwen3moe.block_count": 48, "qwen3moe.attention.head_count": 32,
    "qwen3moe.attention.head_count_kv": 4, "qwen3moe.embedding_length": 2048, "qwen3moe.attention.key_length": 128,
    "qwen3moe.context_length": 40960, "qwen3moe.feed_forward_length": 6144, "qwen3moe.expert_count": 128,
    "qwen3moe.expert_feed_forward_length": 768, "qwen3moe.vocab_size": 151936,
}  # fmt: skip


def _machine(vram_gb: int) -> HardwareInfo:
    gpu = GpuInfo(0, f"GeForce {vram_gb} GB", "nvidia", vram_gb * GIB, vram_gb * GIB, "8.9", "550.54")
    cpu = CpuInfo("Test CPU", "x86_64", 8, 8, ("avx2",))
    return HardwareInfo(os="Test", cpu=cpu, ram_total=128 * GIB, ram_available=96 * GIB, gpus=(gpu,))


def test_the_experts_come_from_the_gguf_header_and_config_json():
    shape = shape_from_gguf_kv(KV)
    assert shape is not None and (shape.experts, shape.expert_feed_forward) == (128, 768)
    config = {"num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_size": 2048,
              "head_dim": 128, "num_experts": 128, "moe_intermediate_size": 768, "intermediate_size": 6144}  # fmt: skip
    from_config = shape_from_config(config)
    assert from_config is not None and (from_config.experts, from_config.expert_feed_forward) == (128, 768)
    dense = shape_from_config({**config, "num_experts": None, "moe_intermediate_size": None})
    assert dense is not None and dense.experts is None and dense.expert_feed_forward is None


def test_an_moe_variant_too_big_for_the_gpu_fits_with_experts_on_the_cpu():
    shape: ModelShape = shape_from_gguf_kv(KV)  # type: ignore[assignment]
    q4 = Variant("Q4_K_M", "gguf", (RemoteFile("Qwen3-30B-A3B-Q4_K_M.gguf", 18_556_689_568),))
    on_16 = estimate_fit(q4, shape, _machine(16), context_length=4096, gpu_offload_supported=True)
    assert (on_16.fit, on_16.label) == (Fit.PARTIAL, "fits with experts on the CPU"), on_16.reason
    assert on_16.plan.gpu_layers == 48 and 0 < on_16.plan.cpu_moe <= 48
    assert "kept in RAM" in on_16.reason
    on_24 = estimate_fit(q4, shape, _machine(24), context_length=4096, gpu_offload_supported=True)
    assert on_24.label == "fits fully on GPU" and on_24.plan.cpu_moe == 0  # room for it all: nothing stays behind
    assert on_16.plan.memory.weights == on_24.plan.memory.weights  # the experts moved to RAM, none were dropped
    gpu_16 = next(d for d in on_16.plan.devices if d.device != "cpu")
    assert gpu_16.fits and gpu_16.memory.weights < on_24.plan.memory.weights - 3 * GIB  # 10 layers of experts less
