"""The memory model counts a model's multimodal projector: its weights and its encoder's compute buffer (from the
projector's header), in the loader's plan, `hearth fit`'s, and the advisor's labels (a variant that fits without
its projector but not with it says so)."""

from __future__ import annotations

import pytest

from engine.backends.base import LlamaCppOptions, LoadOptions
from engine.catalog.advisor import Fit, advise
from engine.catalog.shape import estimate_shape
from engine.catalog.variants import RemoteFile, Variant
from engine.fit.projector import ENCODER_CONTEXT_BYTES, projector_from_file
from engine.hardware import GIB, CpuInfo, HardwareInfo
from tests.engine.fit.projector_files import VisionShape, write_random_mmproj
from tests.engine.server import tiny_vision


def test_the_projector_facts_come_from_its_header_and_tensors(tmp_path):
    tiny = projector_from_file(tiny_vision.MMPROJ_PATH)
    assert (tiny.vision, tiny.audio) == (True, False)
    assert tiny.weights_bytes == 85_120  # its 38 tensors, as llama.cpp maps them
    # 8x8 patches of a 64-pixel tile: up-projection and activation (2 x 64) beside the residual (32), f32; two f32 tiles
    assert tiny.compute_bytes == 4 * 64 * (2 * 64 + 32) + 2 * 4 * 3 * 64 * 64
    assert tiny.context_bytes == ENCODER_CONTEXT_BYTES
    bigger = projector_from_file(write_random_mmproj(tmp_path / "mmproj.gguf", VisionShape(112, 14, 64, 256, 2, 4)))
    assert bigger.compute_bytes == 4 * 64 * (2 * 256 + 64) + 2 * 4 * 3 * 112 * 112
    audio = projector_from_file(tiny_vision.AUDIO_MMPROJ_PATH)
    assert (audio.vision, audio.audio) == (False, True) and audio.compute_bytes > tiny.compute_bytes


def test_the_loaders_plan_counts_the_projector(tmp_path):
    from engine.backends.llamacpp.load_plan import llamacpp_load_plan

    options = LoadOptions(n_ctx=1024, n_seq_max=2, llamacpp=LlamaCppOptions(memory_budget=4 * GIB))
    text = llamacpp_load_plan(tiny_vision.MODEL_PATH, options)
    sees = llamacpp_load_plan(tiny_vision.MODEL_PATH, options, mmproj=tiny_vision.MMPROJ_PATH)
    facts = projector_from_file(tiny_vision.MMPROJ_PATH)
    assert sees.memory.total - text.memory.total == facts.total == sees.projector_bytes
    assert sees.memory.weights - text.memory.weights == facts.weights_bytes
    assert "the projector's" in sees.reason and text.projector_bytes == 0
    # a budget the text model fits and the projector does not: the plan says what the projector takes
    tight = LoadOptions(n_ctx=1024, n_seq_max=1, llamacpp=LlamaCppOptions(memory_budget=text.memory.total + 1))
    big = write_random_mmproj(tmp_path / "mmproj-big.gguf", VisionShape(224, 14, 128, 512, 2, 4))
    refused = llamacpp_load_plan(tiny_vision.MODEL_PATH, tight, mmproj=big)
    assert not refused.fits and refused.projector_bytes > 0


def test_a_loaded_model_that_sees_reports_its_projector_in_its_plan():
    from engine.backends.base import ModelSpec
    from engine.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend()
    spec = ModelSpec(name="tiny-vision", path=tiny_vision.MODEL_PATH, mmproj=tiny_vision.MMPROJ_PATH)
    backend.load(spec, LoadOptions(n_ctx=512, n_seq_max=1, n_threads=1))
    try:
        plan = backend.stats().details["load_plan"]
        assert plan["projector_bytes"] == projector_from_file(tiny_vision.MMPROJ_PATH).total
    finally:
        backend.close()


def _machine(ram_gb: int) -> HardwareInfo:
    cpu = CpuInfo("Test CPU", 8, 16, "x86_64", ("avx2",))
    return HardwareInfo(os="Test", cpu=cpu, ram_total=ram_gb * GIB, ram_available=ram_gb * GIB // 2, gpus=())


@pytest.fixture
def seeing_variant() -> Variant:
    model = RemoteFile("m-8B.Q4_K_M.gguf", 4_920_000_000)
    return Variant("Q4_K_M", "gguf", (model,), projector=RemoteFile("mmproj-m-8B-F16.gguf", 1_200_000_000))


def test_the_advisor_says_when_only_the_projector_keeps_a_variant_out(seeing_variant):
    from dataclasses import replace

    shape = estimate_shape(8_000_000_000)
    tight = advise([seeing_variant], shape, _machine(8), context_length=4096)
    est = tight.get("Q4_K_M")
    assert est.fit is Fit.NONE and est.label == "will not fit with its projector"
    assert "It fits without its projector" in est.reason and "--mmproj-variant none" in est.reason
    alone = advise([replace(seeing_variant, projector=None)], shape, _machine(8), context_length=4096).get("Q4_K_M")
    assert alone.fit is Fit.CPU
    roomy = advise([seeing_variant], shape, _machine(16), context_length=4096, parallel=1).get("Q4_K_M")
    assert roomy.fit is Fit.CPU and "of it the projector that lets it see" in roomy.reason
    assert roomy.plan.projector_bytes >= 1_200_000_000
    text = advise([replace(seeing_variant, projector=None)], shape, _machine(16), context_length=4096, parallel=1)
    assert roomy.plan.memory.total - text.get("Q4_K_M").plan.memory.total == roomy.plan.projector_bytes


def test_hearth_fit_shows_the_projector_of_a_model_that_sees(tmp_path):
    from engine.catalog.registry import ModelRegistry
    from engine.commands.fit import render
    from engine.fit.report import fit_local
    from engine.hardware import detect_hardware

    registry = ModelRegistry(tmp_path / "home", register_starter=False)
    try:
        model = registry.register(tiny_vision.MODEL_PATH, name="eyes", origin_info={"mmproj": str(tiny_vision.MMPROJ_PATH)})
        report = fit_local(model, detect_hardware(), n_ctx=1024, n_seq=1)
    finally:
        registry.close()
    assert report.plan.projector_bytes == projector_from_file(tiny_vision.MMPROJ_PATH).total
    assert report.to_dict()["facts"]["projector"]["vision"] is True
    line = next(x for x in render(report) if x.strip().startswith("projector"))
    assert "encoder buffers" in line and "the projector's header" in line
