"""The speed model's arithmetic with given figures, and the probe's plumbing (its cache follows the hardware)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from engine.catalog.shape import ModelShape
from engine.fit.budget import MemoryBudget
from engine.fit.facts import ModelFacts
from engine.fit.plan import plan_load
from engine.fit.probe import load_cached, machine_speed, measure_kernels
from engine.fit.speed import LOOP_SECONDS, DeviceSpeed, KernelSpeed, MachineSpeed, estimate_speed, kernel_type
from engine.hardware import CpuInfo, GpuInfo, HardwareInfo

GB = 1e9
MB = 1e6


def model(layers: int = 10, layer_mb: float = 90, head_mb: float = 10, **shape) -> ModelFacts:
    """A dense model of ``layers`` Q4_0 blocks; its head is a separate Q4_0 tensor."""
    s = ModelShape(layers=layers, kv_heads=2, head_dim=64, embedding=512, heads=8, vocab=1000, feed_forward=2048, **shape)
    layer = int(layer_mb * MB)
    return ModelFacts(
        format="gguf", weights_bytes=layers * layer + int(head_mb * MB), shape=s, by_type=(("Q4_0", layers * layer),),
        layer_bytes=(layer,) * layers, layer_types=(("Q4_0", layers * layer),), output_bytes=int(head_mb * MB),
        head_type="Q4_0",
    )  # fmt: skip


def machine(rate: float = 10 * GB, *, gpu_rate: float | None = None, prompt: float = 100 * GB) -> MachineSpeed:
    cpu = DeviceSpeed("cpu", "CPU", bandwidth=rate, flops=prompt, kernels=(KernelSpeed("Q4_0", rate, prompt), KernelSpeed("F16", rate, prompt)))
    gpus = (DeviceSpeed("gpu0", "GPU", bandwidth=gpu_rate, flops=100 * prompt, basis="reported by NVML"),) if gpu_rate else ()
    return MachineSpeed("test machine", cpu, gpus)


def test_decode_reads_every_weight_once_at_the_kernels_rate() -> None:
    facts = model()  # 900 MB of layers + 10 MB of head
    est = estimate_speed(facts, machine(), depth=0)
    assert est.bytes_per_token == pytest.approx(910 * MB, rel=1e-6)
    # reading at 10 GB/s, and Hearth's loop around each token
    assert est.decode_tok_s == pytest.approx(1 / (910 * MB / (10 * GB) + LOOP_SECONDS), rel=1e-6)
    assert est.describe() == "about 11 tok/s (reads 0.91 GB a token at 10.0 GB/s measured)"


def test_the_kv_cache_at_the_given_context_is_read_too() -> None:
    facts = model()
    kv_per_token = 10 * 2 * 64 * 2 * 2  # layers x KV heads x head size x (K, V) x f16
    est = estimate_speed(facts, machine(), depth=32768)
    assert est.bytes_per_token == pytest.approx(910 * MB + kv_per_token * 32768, rel=1e-6)
    assert est.decode_tok_s < estimate_speed(facts, machine(), depth=4096).decode_tok_s


def test_an_moe_reads_only_its_active_experts() -> None:
    dense = model()
    moe = replace(dense, expert_bytes=(int(80 * MB),) * 10, shape=replace(dense.shape, experts=8, experts_used=2))
    est = estimate_speed(moe, machine(), depth=0)
    # each layer: 10 MB shared + 2/8 of 80 MB of experts
    assert est.bytes_per_token == pytest.approx(10 * (10 + 20) * MB + 10 * MB, rel=1e-6)


def test_an_moes_prompt_rows_run_its_experts_at_the_expert_products_rate() -> None:
    # each layer: 10 MB shared + 2 of 8 experts of 80 MB; the experts' products (MUL_MAT_ID) run at a third of the rate
    dense = model(head_mb=0)
    moe = replace(dense, expert_bytes=(int(80 * MB),) * 10, shape=replace(dense.shape, experts=8, experts_used=2))
    cpu = DeviceSpeed("cpu", "CPU", bandwidth=10 * GB, flops=100 * GB,
                      kernels=(KernelSpeed("Q4_0", 10 * GB, 90 * GB, 30 * GB),))  # fmt: skip
    est = estimate_speed(moe, MachineSpeed("m", cpu), depth=0)
    weights = 8 / 4.5  # Q4_0: weights a byte
    row = 2 * weights * 10 * (10 * MB / (90 * GB) + 20 * MB / (30 * GB))
    assert est.prompt_tok_s == pytest.approx(1 / row, rel=1e-6)
    # decoding one row reads them as before; unmeasured, the experts run at the dense products' rate
    assert est.decode_tok_s == pytest.approx(estimate_speed(moe, machine(), depth=0).decode_tok_s, rel=1e-6)
    unmeasured = MachineSpeed("m", replace(cpu, kernels=(KernelSpeed("Q4_0", 10 * GB, 90 * GB),)))
    assert estimate_speed(moe, unmeasured, depth=0).prompt_tok_s == pytest.approx(90 * GB / (2 * weights * 300 * MB))


def test_partial_offload_reads_gpu_layers_at_the_gpus_rate() -> None:
    facts = model()
    hw = HardwareInfo(os="Linux", cpu=CpuInfo("CPU", "x86_64", 2, 2), ram_total=64 * 2**30, ram_available=64 * 2**30,
                      gpus=(GpuInfo(0, "GPU", "nvidia", 2 * 2**30),))  # fmt: skip
    plan = plan_load(facts, MemoryBudget.from_hardware(hw, live=False), n_ctx=512, n_seq=1)
    assert 0 < plan.gpu_layers < facts.layers
    fast = machine(gpu_rate=1000 * GB)
    est = estimate_speed(facts, fast, plan=plan, depth=0)
    cpu_layers = facts.layers - plan.gpu_layers
    # the CPU's layers and the head (with the rest of the model on the CPU) at 10 GB/s, the GPU's at 1,000
    expected = (cpu_layers * 90 * MB + 10 * MB) / (10 * GB) + plan.gpu_layers * 90 * MB / (1000 * GB) + LOOP_SECONDS
    assert est.decode_tok_s == pytest.approx(1 / expected, rel=1e-6)
    assert est.basis == "reported by NVML"


def test_batching_helps_until_the_rows_compute_is_the_cost() -> None:
    # a row's products cost a tenth of a step's reading
    facts = model(layers=4, layer_mb=100, head_mb=1)
    est = estimate_speed(facts, machine(rate=10 * GB, prompt=80 * GB), depth=0)
    tokens = [t for _, t in est.slots]
    assert tokens == sorted(tokens)  # more streams never decode less in all
    extra = 1 / est.prompt_tok_s + LOOP_SECONDS  # with no cache to read, a further stream costs a prompt row
    ceiling = 1 / extra
    assert tokens[-1] < ceiling
    assert 1 < est.batch_limit <= 16
    n = est.batch_limit
    one = 1 / est.decode_tok_s
    assert n / (one + (n - 1) * extra) >= 0.9 * ceiling > (n - 1) / (one + (n - 2) * extra)
    assert "batching stops helping past about" in est.describe_batching()


def test_batching_does_not_help_where_a_row_costs_a_whole_step() -> None:
    facts = model(layers=4, layer_mb=10, head_mb=1)
    est = estimate_speed(facts, machine(rate=10 * GB, prompt=1 * GB), depth=0)
    assert all(t == pytest.approx(est.decode_tok_s) for _, t in est.slots)
    assert est.batch_limit == 1


def test_prompt_tokens_cost_two_operations_a_weight() -> None:
    facts = model(layers=10, layer_mb=90, head_mb=10)
    est = estimate_speed(facts, machine(prompt=100 * GB), depth=0)
    weights = 910 * MB * 8 / 4.5  # Q4_0: 4.5 bits a weight
    assert est.prompt_tok_s == pytest.approx(100 * GB / (2 * weights), rel=1e-6)


def test_a_variant_label_names_its_kernel() -> None:
    assert kernel_type("Q4_K_M") == "Q4_K"
    assert kernel_type("IQ4_NL") == "IQ4_NL"
    assert kernel_type("Q3_K_XL") == "Q3_K"
    assert kernel_type("8bit") == "Q8_0"


def test_a_hub_variant_is_timed_by_its_labels_mix_of_types() -> None:
    from engine.fit.facts import facts_from_shape
    from engine.fit.speed import label_mix

    shape = ModelShape(layers=28, kv_heads=2, head_dim=128, embedding=1536, heads=12, vocab=151_936, feed_forward=8960)
    facts = facts_from_shape(shape, 986_000_000, bits_per_weight=4.85)  # a Hub variant: file sizes, no tensor table
    mix = label_mix("Q4_K_M", facts)
    # half the layers' value and down projections are Q6_K: a fifth of the layers' bytes (the random 1.5B's file: 0.206)
    assert set(mix) == {"Q4_K", "Q6_K"} and mix["Q6_K"] == pytest.approx(0.206, abs=0.01)
    assert label_mix("Q4_K_S", facts) == {"Q4_K": 1.0} and label_mix("Q8_0", facts) == {"Q8_0": 1.0}
    # with Q6_K's kernels twice as slow as Q4_K's, Q4_K_M decodes slower than its bytes at Q4_K's rate would
    cpu = DeviceSpeed("cpu", "CPU", 20 * GB, 100 * GB, kernels=(KernelSpeed("Q4_K", 20 * GB, 100 * GB),
                                                                KernelSpeed("Q6_K", 10 * GB, 100 * GB)))  # fmt: skip
    m = MachineSpeed("m", cpu)
    q4_k_m = estimate_speed(facts, m, depth=0, label="Q4_K_M")
    as_q4_k = estimate_speed(facts, m, depth=0, label="Q4_K_S")
    layers, head = sum(facts.layer_weights()), max(facts.output_bytes, facts.input_bytes)  # tied: the embeddings
    assert 1 / q4_k_m.decode_tok_s - LOOP_SECONDS == pytest.approx(
        layers * (mix["Q4_K"] / (20 * GB) + mix["Q6_K"] / (10 * GB)) + head / (10 * GB), rel=1e-6)  # the head: Q6_K
    assert q4_k_m.decode_tok_s < as_q4_k.decode_tok_s


def test_slow_label_under_the_threshold() -> None:
    est = estimate_speed(model(layers=100), machine(rate=1 * GB), depth=0)
    assert est.slow(10)
    assert est.label(10) == "slow here: about 0.1 tok/s"


# -- the probe's cache ---------------------------------------------------------------------------------


def hardware(cpu: str = "Test CPU", ram_gib: int = 16) -> HardwareInfo:
    return HardwareInfo(os="Linux", cpu=CpuInfo(cpu, "x86_64", 2, 2, ("avx2",)), ram_total=ram_gib * 2**30,
                        ram_available=ram_gib * 2**30)  # fmt: skip


def test_figures_are_measured_once_and_again_when_the_hardware_changes(tmp_path) -> None:
    path = tmp_path / "machine_speed.json"
    probed: list[str] = []

    def probe(hw: HardwareInfo) -> MachineSpeed:
        probed.append(hw.identity)
        return replace(machine(), identity=hw.identity)

    first = machine_speed(hardware(), probe=probe, path=path)
    again = machine_speed(replace(hardware(), ram_available=1), probe=probe, path=path)  # what is free is no change
    assert len(probed) == 1 and again == first
    assert json.loads(path.read_text())["identity"] == hardware().identity
    machine_speed(hardware(ram_gib=32), probe=probe, path=path)  # more RAM: measured again
    machine_speed(hardware(cpu="Another CPU", ram_gib=32), probe=probe, path=path)
    assert len(probed) == 3
    assert load_cached(hardware().identity, path) is None  # the figures kept are the new machine's
    assert load_cached(hardware(cpu="Another CPU", ram_gib=32).identity, path) is not None


def test_an_unreadable_cache_is_measured_again(tmp_path) -> None:
    path = tmp_path / "machine_speed.json"
    path.write_text("{not json")
    speed = machine_speed(hardware(), probe=lambda hw: replace(machine(), identity=hw.identity), path=path)
    assert speed.identity == hardware().identity
    assert load_cached(hardware().identity, path) == speed


def test_the_real_kernel_probe_measures_llamacpp(tmp_path) -> None:
    """The probe's own code, once, on a tiny model: a type's decode and prompt rates and the fixed costs come back."""
    pytest.importorskip("llama_cpp")
    kernels, token_cost, layer_cost = measure_kernels(
        threads=2, types=("Q4_0",), target_bytes=2 * 2**20, rounds=1, rows=8, prompt_width=256, folder=tmp_path,
        bandwidth=20 * GB, depth=64,
    )  # fmt: skip
    k, kv, attention = kernels
    assert k.type == "Q4_0" and kv.type == "KV" and attention.type == "ATTENTION"
    assert 0 < k.decode_rate <= 20 * GB and 0 < kv.decode_rate <= 20 * GB  # never faster than memory
    assert k.prompt_rate > 0 and k.expert_rate > 0 and attention.prompt_rate > 0
    assert token_cost >= 0 and layer_cost >= 0
    assert not list(tmp_path.iterdir())  # the probe models are gone



def test_probe_folders_that_stopped_processes_left_are_removed(tmp_path) -> None:
    """A worker killed while its probe ran leaves the folder behind; the next probe takes it away, not a running one's."""
    import os
    import subprocess
    import sys
    import time

    from engine.fit.probe import PROBE_PREFIX, STALE_PROBE_S, _probe_folder

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{PROBE_PREFIX}{int(ended.stdout)}-abc"
    alive = tmp_path / f"{PROBE_PREFIX}{os.getppid()}-def"
    old_style, recent = tmp_path / f"{PROBE_PREFIX}x1y2z3", tmp_path / f"{PROBE_PREFIX}q7w8e9"
    for folder in (dead, alive, old_style, recent):
        folder.mkdir()
        (folder / "F16-decode.gguf").write_bytes(b"GGUF")
    long_ago = time.time() - STALE_PROBE_S - 60
    os.utime(old_style, (long_ago, long_ago))
    other = tmp_path / "someone-elses"
    other.mkdir()

    mine = _probe_folder(tmp_path)
    assert mine.name.startswith(f"{PROBE_PREFIX}{os.getpid()}-") and mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, recent.name, mine.name, other.name])


def test_a_probe_model_leaves_no_file_while_it_is_measured(tmp_path) -> None:
    """Its file goes once llama.cpp has mapped it: a process killed mid-probe leaves nothing on the disk (POSIX)."""
    pytest.importorskip("llama_cpp")
    import os

    from engine.fit.probe import _forget, _Probe, write_probe_model

    path = tmp_path / "F16-decode.gguf"
    write_probe_model(path, "F16", width=128, layers=1)
    probe = _Probe(path, rows=8)
    try:
        _forget(path)
        assert path.exists() == (os.name == "nt")
        assert probe.decode(tokens=2) > 0 and probe.prompt() > 0  # still measures from the mapped pages
    finally:
        probe.close()

def test_hearth_fit_shows_the_speed_with_its_basis(starter_path) -> None:
    from engine.commands.fit import render
    from engine.fit.report import fit_model
    from engine.hardware import detect_hardware
    from tests.engine.fit.speed_figures import cpu_figures

    hw = detect_hardware()
    report = fit_model(str(starter_path), hw, n_ctx=4096, n_seq=1, machine=MachineSpeed(hw.identity, cpu_figures()))
    speed = report.to_dict()["speed_chat"]
    # the starter's Q4_1 layers run on Q4_1's kernels, its tied Q8_0 embeddings are the head it reads
    assert speed["depth"] == 1024 and speed["bytes_per_token"] > report.facts.weights_bytes * 0.9
    lines = "\n".join(render(report))
    assert "speed      about " in lines and "GB/s measured) with 1,024 tokens in context" in lines
    assert "with all 4,096" in lines and "16 streams together decode about" in lines
    assert fit_model(str(starter_path), hw).to_dict()["speed"] is None  # no figures, no speed


def test_a_gpus_bandwidth_is_nvmls_checked_where_torch_can() -> None:
    from engine.fit.probe import gpu_speeds

    cpu = machine().cpu
    card = GpuInfo(0, "Card", "nvidia", 24 * 2**30)
    (reported,) = gpu_speeds([card], cpu, reported={0: 1000 * GB}, measure=None)
    assert reported.bandwidth == pytest.approx(800 * GB) and reported.basis == "reported by NVML"
    (checked,) = gpu_speeds([card], cpu, reported={0: 1000 * GB}, measure=lambda i: (900 * GB, 500_000 * GB))
    assert checked.bandwidth == 900 * GB and checked.basis == "measured (NVML reports 1,000 GB/s)"
    assert gpu_speeds([card], cpu, reported={}, measure=None) == ()  # neither: no figures, the CPU's are not guessed
    apple = GpuInfo(0, "Apple M3 GPU", "apple", 16 * 2**30, unified_memory=True)
    (unified,) = gpu_speeds([apple], cpu, reported={}, measure=None)
    assert unified.bandwidth == cpu.bandwidth
