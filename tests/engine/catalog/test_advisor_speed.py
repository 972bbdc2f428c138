"""The advisor ranks by what is usable here: a variant under the speed threshold is not recommended and says so,
and at the same size and quality the format whose kernels run faster here is taken, with the reason."""

from __future__ import annotations

from dataclasses import replace

from engine.catalog.advisor import advise
from engine.catalog.recommended import load_picks, recommend
from engine.catalog.shape import ModelShape
from engine.catalog.variants import RemoteFile, Variant
from engine.fit.speed import KernelSpeed, MachineSpeed
from engine.hardware import CpuInfo, HardwareInfo
from tests.engine.fit.speed_figures import cpu_figures

GIB = 2**30
GB = 1e9
CPU_24 = HardwareInfo(os="Linux", cpu=CpuInfo("Test CPU", "x86_64", 2, 2, ("avx2",)), ram_total=24 * GIB,
                      ram_available=20 * GIB)  # fmt: skip
MACHINE = MachineSpeed(CPU_24.identity, cpu_figures())
LLAMA_8B = ModelShape(layers=32, kv_heads=8, head_dim=128, context_length=131072, embedding=4096, heads=32,
                      vocab=128256, feed_forward=14336, architecture="llama")  # fmt: skip
SMALL = ModelShape(layers=16, kv_heads=8, head_dim=64, context_length=131072, embedding=2048, heads=32, vocab=128256,
                   feed_forward=8192, architecture="llama")  # fmt: skip


def variants(sizes: dict[str, float]) -> list[Variant]:
    return [Variant(name, "gguf", (RemoteFile(f"m-{name}.gguf", int(gb * 1e9)),)) for name, gb in sizes.items()]


def test_a_model_slower_than_the_threshold_is_not_recommended_and_says_so() -> None:
    advice = advise(variants({"Q4_K_M": 4.9, "Q8_0": 8.5}), LLAMA_8B, CPU_24, machine=MACHINE, min_speed=10)
    assert advice.recommended is None  # both fit in 24 GB, and neither decodes at 10 tok/s from 17 GB/s
    assert "under 10 tok/s here" in advice.reason
    q8 = advice.get("Q8_0")
    assert q8 is not None and q8.slow
    assert q8.speed_label.startswith("slow here: about ")
    assert q8.fit.value == "cpu"  # it still fits: the label is the fit, the speed beside it


def test_the_suggested_variant_is_the_best_that_meets_the_threshold() -> None:
    advice = advise(variants({"Q4_K_M": 0.8, "Q8_0": 1.3, "F16": 2.5}), SMALL, CPU_24, machine=MACHINE, min_speed=10)
    speeds = {e.variant: e.speed.decode_tok_s for e in advice.estimates if e.speed}
    assert speeds["F16"] < 10 <= speeds["Q8_0"]
    assert advice.recommended == "Q8_0"  # not F16, the largest that fits
    assert "Left out as slow here (under 10 tok/s): F16" in advice.reason
    assert "about" in advice.reason and "tok/s" in advice.reason
    # without figures for this machine nothing is judged by speed: the largest that fits
    assert advise(variants({"Q4_K_M": 0.8, "Q8_0": 1.3, "F16": 2.5}), SMALL, CPU_24).recommended == "F16"


def test_the_threshold_is_a_setting() -> None:
    listing = variants({"Q4_K_M": 0.8, "Q8_0": 1.3, "F16": 2.5})
    assert advise(listing, SMALL, CPU_24, machine=MACHINE, min_speed=1).recommended == "F16"
    assert advise(listing, SMALL, CPU_24, machine=MACHINE, min_speed=15).recommended == "Q4_K_M"


def test_at_the_same_size_and_quality_the_faster_kernels_win_with_the_reason() -> None:
    # Q4_1 ranks a little above IQ4_NL by quality, and runs on plain kernels here (measured slower)
    listing = variants({"Q4_1": 0.86, "IQ4_NL": 0.82})
    advice = advise(listing, SMALL, CPU_24, machine=MACHINE)
    assert advice.recommended == "IQ4_NL"
    assert "IQ4_NL rather than Q4_1" in advice.reason and "kernels run faster on this CPU" in advice.reason
    # where Q4_1's kernels were as fast, quality decides as before
    even = replace(MACHINE, cpu=replace(MACHINE.cpu, kernels=(*MACHINE.cpu.kernels, KernelSpeed("Q4_1", 17 * GB, 300 * GB))))
    assert advise(listing, SMALL, CPU_24, machine=even).recommended == "Q4_1"


def test_recommended_models_that_are_slow_here_come_after_the_usable_ones() -> None:
    listing = recommend(load_picks(), CPU_24, machine=MACHINE)
    chat = [e for e in listing.entries if e.pick.category == "chat"]
    usable = [e.usable for e in chat]
    assert usable == sorted(usable, reverse=True)  # the usable ones first
    slow = [e for e in chat if e.slow]
    assert slow, "a 24B model on a 2-core CPU is slow"
    d = slow[0].to_dict()
    assert d["slow"] and d["speed"].startswith("slow here: about ") and d["suggested"] is None
    top = chat[0].to_dict()
    assert top["suggested"] and not top["slow"] and float(top["speed"].split()[1].replace(",", "")) >= 10
