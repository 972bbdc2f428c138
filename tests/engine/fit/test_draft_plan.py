"""The memory model counts a draft model for speculative decoding (`--speculative draft:MODEL`): its weights, its
KV cache for the plan's slots and context, its buffers and bookkeeping, on the GPU with the model's layers or in
RAM; the slots Hearth chooses leave room for it, a budget it does not fit in says so, and a draft that cannot be
read, or whose vocabulary is not the model's, leaves the plan as it was (the backend refuses that draft itself)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.backends.base import LlamaCppOptions, LoadOptions
from engine.backends.speculative import SpeculativeOptions
from engine.fit import MemoryBudget, facts_from_gguf, kv_bytes_per_token
from engine.fit.budget import DeviceBudget
from engine.fit.draft import draft_compute_bytes, draft_memory
from engine.fit.memory import llamacpp_model_bytes, output_buffer_bytes
from engine.fit.plan import plan_gguf
from tests.engine.server.tiny_vision import MODEL_PATH as VISION_PATH

MIB = 1024**2
GIB = 1024**3


@pytest.fixture(scope="module")
def starter(starter_path):
    return facts_from_gguf(starter_path)


@pytest.fixture(scope="module")
def drafted(starter):
    return replace(starter, draft=starter)  # the starter drafting for itself, as the backend's tests run it


def _gpu_budget(gpu_bytes: int) -> MemoryBudget:
    return MemoryBudget(DeviceBudget("cpu", "RAM", 64 * GIB), (DeviceBudget("gpu0", "Test GPU", gpu_bytes),), gpu_offload=True)


def test_the_plan_with_a_draft_is_larger_by_its_weights_kv_cache_and_buffers(starter, drafted):
    budget = MemoryBudget.ram_only(8 * GIB)
    tensors = starter.input_bytes + sum(starter.layer_weights()) + starter.output_bytes
    kv_1 = 0
    for slots in (1, 4):
        plain = plan_gguf(starter, budget, n_ctx=2048, n_seq=slots, kv_type="f16")
        with_draft = plan_gguf(drafted, budget, n_ctx=2048, n_seq=slots, kv_type="f16")
        added = with_draft.memory.total - plain.memory.total
        assert added == with_draft.draft_bytes > 0 and plain.draft_bytes == 0
        assert with_draft.memory.weights - plain.memory.weights == tensors
        # its own 16-bit cache: one sequence of the plan's context per slot
        kv = with_draft.memory.kv_cache - plain.memory.kv_cache
        assert kv == kv_bytes_per_token(starter, "f16") * 2048 * slots
        kv_1 = kv_1 or kv
        assert kv == slots * kv_1
        buffers = draft_compute_bytes(starter, n_seq=slots) + output_buffer_bytes(starter, n_outputs=slots)
        assert with_draft.memory.buffers - plain.memory.buffers == buffers
        assert with_draft.memory.runtime - plain.memory.runtime == llamacpp_model_bytes(starter)
        assert f"the draft model's {added / 1e9:.1f} GB included" in with_draft.reason
        assert "draft" not in plain.reason and with_draft.to_dict()["draft_bytes"] == added


def test_the_draft_goes_to_the_gpu_with_the_models_layers_and_its_embeddings_stay_in_ram(starter, drafted):
    budget = _gpu_budget(4 * GIB)
    plain = plan_gguf(starter, budget, n_ctx=2048, n_seq=2, kv_type="f16")
    with_draft = plan_gguf(drafted, budget, n_ctx=2048, n_seq=2, kv_type="f16")
    assert plain.gpu_layers == with_draft.gpu_layers == starter.layers
    (cpu0, gpu0), (cpu1, gpu1) = plain.devices, with_draft.devices
    assert gpu1.memory.weights - gpu0.memory.weights == sum(starter.layer_weights()) + starter.output_bytes
    assert gpu1.memory.kv_cache - gpu0.memory.kv_cache == kv_bytes_per_token(starter) * 2048 * 2
    assert cpu1.memory.weights - cpu0.memory.weights == starter.input_bytes
    assert cpu1.memory.kv_cache == cpu0.memory.kv_cache == 0
    on_gpu = draft_memory(starter, n_ctx=2048, n_seq=2, on_gpu=True)
    assert (gpu1.memory.total - gpu0.memory.total, cpu1.memory.total - cpu0.memory.total) == (on_gpu.device.total, on_gpu.host.total)
    assert with_draft.draft_bytes == on_gpu.total
    # on the CPU all of it is in RAM
    cpu_only = plan_gguf(drafted, MemoryBudget.ram_only(8 * GIB), n_ctx=2048, n_seq=2, kv_type="f16")
    assert cpu_only.draft_bytes == draft_memory(starter, n_ctx=2048, n_seq=2, on_gpu=False).total


def test_hearth_chooses_fewer_slots_with_a_draft_and_a_draft_that_does_not_fit_says_so(starter, drafted):
    budget = MemoryBudget.ram_only(600 * MIB)
    plain = plan_gguf(starter, budget, n_ctx=2048)
    with_draft = plan_gguf(drafted, budget, n_ctx=2048)
    assert plain.fits and with_draft.fits and with_draft.n_seq < plain.n_seq
    assert with_draft.memory.total <= budget.ram.usable
    assert not plan_gguf(drafted, budget, n_ctx=2048, n_seq=with_draft.n_seq + 1, kv_type="f16").fits
    # a budget the model fits in alone: with the draft the plan is refused, and the reason counts the draft
    tight = MemoryBudget.ram_only(plan_gguf(starter, budget, n_ctx=2048, n_seq=1, kv_type="f16").memory.total + MIB)
    refused = plan_gguf(drafted, tight, n_ctx=2048, n_seq=1, kv_type="f16")
    assert not refused.fits and "the draft model's" in refused.reason and "usable RAM" in refused.reason
    # on a GPU the draft's share can push the model's layers off it
    gpu = _gpu_budget(plan_gguf(starter, _gpu_budget(4 * GIB), n_ctx=2048, n_seq=1).devices[1].memory.total + MIB)
    assert plan_gguf(starter, gpu, n_ctx=2048, n_seq=1).gpu_layers == starter.layers
    assert plan_gguf(drafted, gpu, n_ctx=2048, n_seq=1).gpu_layers < starter.layers


def test_the_loaders_plan_counts_the_draft_named_in_the_options_and_not_one_it_cannot_read_or_use(starter_path, tmp_path):
    from engine.backends.llamacpp.load_plan import draft_for, llamacpp_load_plan

    options = LoadOptions(n_ctx=1024, n_seq_max=2, llamacpp=LlamaCppOptions(memory_budget=4 * GIB))
    drafting = replace(options, speculative=SpeculativeOptions.parse(f"draft:{starter_path}"))
    assert draft_for(options) is None and draft_for(drafting) == starter_path
    plain = llamacpp_load_plan(starter_path, options)
    with_draft = llamacpp_load_plan(starter_path, drafting, draft=draft_for(drafting))
    assert with_draft.draft_bytes == draft_memory(facts_from_gguf(starter_path), n_ctx=1024, n_seq=2, on_gpu=False).total
    assert with_draft.memory.total == plain.memory.total + with_draft.draft_bytes
    not_gguf = tmp_path / "draft.gguf"
    not_gguf.write_bytes(b"not a model")
    for unreadable in (not_gguf, tmp_path / "missing.gguf"):
        assert llamacpp_load_plan(starter_path, drafting, draft=unreadable) == plain
    # SmolVLM's text model: the starter's tokens and then picture tokens of its own, which the backend refuses
    assert llamacpp_load_plan(starter_path, drafting, draft=VISION_PATH) == plain
