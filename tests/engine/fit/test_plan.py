"""The memory model on the starter model's real GGUF header: weights per tensor type, the slots and
context chosen under a small budget, the KV cache lever, and refusals that name what would fit."""

from __future__ import annotations

import pytest

from engine.fit import MemoryBudget, facts_from_gguf, kv_bytes_per_token, plan_load
from engine.fit.plan import PREFILL_BLOCK, plan_gguf, prefill_block

MIB = 1024**2


@pytest.fixture(scope="module")
def starter(starter_path):
    return facts_from_gguf(starter_path)


def test_the_starter_facts_come_from_its_tensor_table(starter, starter_path):
    assert (starter.layers, starter.shape.kv_heads, starter.shape.head_dim, starter.vocab) == (30, 3, 64, 49152)
    types = dict(starter.by_type)
    assert set(types) == {"Q4_1", "Q8_0", "F32"} and types["Q4_1"] > types["Q8_0"] > types["F32"]
    tensors = sum(types.values())
    assert tensors == sum(starter.layer_bytes) + starter.input_bytes + starter.output_bytes
    assert 0 < starter_path.stat().st_size - tensors < 4 * MIB  # the header and vocabulary
    assert starter.input_bytes > 0 and len(set(starter.layer_bytes)) == 1
    # 30 layers x 3 KV heads x 64 x (K, V) x 2 bytes, as llama.cpp's "KV buffer size = 90.00 MiB" at 4096
    assert kv_bytes_per_token(starter) * 4096 == 90 * MIB
    assert kv_bytes_per_token(starter, "q8_0") * 4096 == int(90 * MIB * 34 / 64)


def _largest_fitting(starter, budget, **kw) -> int:
    return max(p for p in range(1, 17) if plan_gguf(starter, budget, n_seq=p, kv_type="f16", **kw).fits)


def test_slots_are_chosen_to_fit_a_small_budget(starter):
    budget = MemoryBudget.ram_only(300 * MIB)
    plan = plan_load(starter, budget, n_ctx=1024)  # 22.5 MiB of KV cache per slot
    assert plan.fits and plan.n_ctx == 1024 and plan.kv_type == "f16" and plan.gpu_layers == 0
    assert 1 < plan.n_seq < 16 and plan.n_seq == _largest_fitting(starter, budget, n_ctx=1024)
    more = plan_gguf(starter, budget, n_ctx=1024, n_seq=plan.n_seq + 1, kv_type="f16")
    assert plan.memory.total <= 300 * MIB < more.memory.total
    assert plan.memory.kv_cache == plan.n_seq * 90 * MIB // 4
    assert f"{plan.n_seq} slots of 1,024 tokens" in plan.reason and "more would not fit" in plan.reason
    roomy = plan_load(starter, MemoryBudget.ram_only(16 * 1024 * MIB))
    assert roomy.n_seq == 16 and "the most Hearth opens by default" in roomy.reason


def test_the_kv_cache_takes_at_most_a_third_of_ram_when_hearth_chooses(starter):
    plan = plan_load(starter, MemoryBudget.ram_only(2048 * MIB), n_ctx=8192)  # 180 MiB per slot
    assert plan.n_seq == 3 and plan.memory.kv_cache <= 2048 * MIB / 3 < plan.memory.kv_cache + 180 * MIB
    assert "over a third of the 2.1 GB of usable RAM" in plan.reason
    assert _largest_fitting(starter, MemoryBudget.ram_only(2048 * MIB), n_ctx=8192) > 3  # asked for, more fit


def test_a_quantized_kv_cache_is_the_lever_when_16_bits_do_not_fit(starter):
    budget = MemoryBudget.ram_only(450 * MIB)
    assert not plan_load(starter, budget, n_ctx=16384, kv_type="f16").fits
    plan = plan_load(starter, budget, n_ctx=16384)
    assert plan.fits and plan.kv_type == "q8_0" and plan.n_ctx == 16384
    assert "a 16-bit KV cache would not fit, an 8-bit one does" in plan.reason
    with pytest.raises(ValueError, match="needs flash attention"):
        plan_load(starter, budget, kv_type="q4_0", flash_attn=False)
    with pytest.raises(ValueError, match="f16, q8_0, q4_0"):
        plan_load(starter, budget, kv_type="fp8")


def test_settings_that_cannot_fit_are_refused_naming_what_would(starter):
    budget = MemoryBudget.ram_only(600 * MIB)
    plan = plan_load(starter, budget, n_seq=16, kv_type="f16")
    assert not plan.fits
    best = _largest_fitting(starter, budget)
    assert plan.reason.startswith("16 slots of 4,096 tokens need about")
    assert "more than the 0.6 GB usable RAM" in plan.reason
    assert f"{best} slots of 4,096 tokens (--parallel {best})" in plan.reason
    ctx = int(plan.reason.split("--ctx ")[1].split(")")[0])
    assert plan_gguf(starter, budget, n_seq=16, n_ctx=ctx, kv_type="f16").fits
    assert not plan_gguf(starter, budget, n_seq=16, n_ctx=ctx + 256, kv_type="f16").fits
    hopeless = plan_load(starter, MemoryBudget.ram_only(100 * MIB), n_ctx=512)
    assert not hopeless.fits and "pick a smaller quantization or model" in hopeless.reason


def test_the_default_context_is_shortened_when_one_slot_of_it_does_not_fit(starter):
    plan = plan_load(starter, MemoryBudget.ram_only(250 * MIB))
    assert plan.fits and plan.n_seq == 1 and plan.n_ctx < 4096
    assert "4,096 tokens of context would not fit" in plan.reason


def test_the_live_budget_reads_each_gpus_free_memory_and_keeps_headroom():
    from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo

    gpus = (GpuInfo(0, "A", "nvidia", 24 * GIB, 20 * GIB), GpuInfo(1, "B", "nvidia", 24 * GIB, 6 * GIB))
    hw = HardwareInfo(os="t", cpu=CpuInfo("c", "x86_64", 8, 16), ram_total=64 * GIB, ram_available=40 * GIB, gpus=gpus)
    live = MemoryBudget.from_hardware(hw, live=True)
    rest = MemoryBudget.from_hardware(hw, live=False)
    assert [g.usable for g in live.gpus] == [19 * GIB, 5 * GIB]  # free less 1 GiB, per GPU
    assert [g.usable for g in rest.gpus] == [int(24 * GIB * 0.95)] * 2  # at most 95% of a GPU
    assert live.ram.usable == int(40 * GIB * 0.85) and rest.ram.usable == int(64 * GIB * 0.8)
    assert not MemoryBudget.from_hardware(hw, live=True, gpu_offload=False).usable_gpus


def test_the_paged_engines_block_pool_and_its_fp8_cache():
    from engine.catalog.shape import ModelShape
    from engine.fit import facts_from_shape
    from engine.fit.plan import plan_paged
    from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo

    shape = ModelShape(layers=32, kv_heads=8, head_dim=128, context_length=8192, embedding=4096, heads=32,
                       vocab=128_256, feed_forward=14336)  # fmt: skip
    facts = facts_from_shape(shape, 16_060_000_000, format="safetensors")
    gpu = HardwareInfo(os="t", cpu=CpuInfo("c", "x86_64", 8, 16), ram_total=64 * GIB, ram_available=60 * GIB,
                       gpus=(GpuInfo(0, "G", "nvidia", 24 * GIB, 24 * GIB),))  # fmt: skip
    budget = MemoryBudget.from_hardware(gpu, live=True)
    f16, fp8 = plan_paged(facts, budget), plan_paged(facts, budget, kv_type="fp8")
    assert f16.fits and f16.backend == "paged" and f16.kv_blocks > 0
    assert abs(fp8.kv_blocks - 2 * f16.kv_blocks) <= 1  # an 8-bit cache: twice the blocks in the same memory
    assert fp8.memory.kv_cache <= f16.memory.kv_cache + 16 * 131072
    cpu = plan_paged(facts, MemoryBudget.ram_only(32 * GIB))
    # on the CPU the engine runs in float32: a "16-bit" cache is held in its 4-byte elements
    assert cpu.memory.kv_cache <= 4 * GIB and cpu.kv_blocks * 16 * 2 * 131072 == cpu.memory.kv_cache
    with pytest.raises(ValueError, match="f16, fp8"):
        plan_paged(facts, budget, kv_type="q8_0")


def test_the_paged_pool_shortens_a_default_context_and_refuses_an_asked_one_naming_what_fits():
    from engine.catalog.shape import ModelShape
    from engine.fit import facts_from_shape
    from engine.fit.plan import plan_paged

    shape = ModelShape(layers=24, kv_heads=8, head_dim=64, context_length=32768, embedding=512, heads=8,
                       vocab=32000, feed_forward=2048)  # fmt: skip
    facts = facts_from_shape(shape, 200 * MIB, format="safetensors")
    # 24 x 8 x 64 x 2 x 4 bytes (float32 on the CPU) = 96 KiB a token; 100 blocks of 16 tokens hold 1,600
    short = plan_paged(facts, MemoryBudget.ram_only(2048 * MIB), kv_blocks=100)
    assert short.fits and short.n_ctx == 1600 and "would not fit in it, so the context is 1,600" in short.reason
    assert short.memory.kv_cache == 100 * 16 * 24 * 8 * 64 * 2 * 4
    asked = plan_paged(facts, MemoryBudget.ram_only(2048 * MIB), n_ctx=4096, kv_blocks=100)
    assert not asked.fits and "--ctx 1536 would fit" in asked.reason
    tight = plan_paged(facts, MemoryBudget.ram_only(300 * MIB), n_ctx=4096)
    assert not tight.fits and "more than the" in tight.reason


def test_prompt_blocks_are_larger_on_the_cpu_than_with_layers_on_a_gpu():
    # the GPU's block is what the fit model sizes llama.cpp's compute buffer with (the CPU's is never resident)
    assert prefill_block(0) == 256 and prefill_block(1) == prefill_block(80) == PREFILL_BLOCK == 64
