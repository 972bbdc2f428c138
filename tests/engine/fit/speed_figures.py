"""Fixed speed figures for tests: a 2-core CPU like the one the speed model was fitted on (rounded from a probe).

The tests' data folder holds these for this machine's hardware identity (tests/conftest.py), so no test measures
the machine unless it means to.
"""

from __future__ import annotations

from pathlib import Path

from engine.fit.speed import DeviceSpeed, KernelSpeed, MachineSpeed

GB = 1e9


def cpu_figures(name: str = "Test CPU") -> DeviceSpeed:
    kernels = (
        KernelSpeed("F16", 17 * GB, 180 * GB), KernelSpeed("Q8_0", 17 * GB, 220 * GB),
        KernelSpeed("Q6_K", 17 * GB, 300 * GB), KernelSpeed("Q5_K", 17 * GB, 360 * GB),
        KernelSpeed("Q4_K", 17 * GB, 310 * GB), KernelSpeed("Q4_0", 17 * GB, 300 * GB),
        KernelSpeed("Q4_1", 12.5 * GB, 107 * GB), KernelSpeed("IQ4_NL", 17 * GB, 300 * GB),
        KernelSpeed("Q3_K", 15 * GB, 310 * GB), KernelSpeed("Q2_K", 17 * GB, 200 * GB),
    )  # fmt: skip
    return DeviceSpeed("cpu", name, 25 * GB, 180 * GB, kernels=kernels, token_overhead=4e-5, layer_overhead=5e-5)


def machine_figures(identity: str, gpus: int = 0) -> MachineSpeed:
    """This CPU's figures, and for each of ``gpus`` GPUs a mid-range card's (500 GB/s, NVML's word for it)."""
    cards = tuple(DeviceSpeed(f"gpu{i}", f"GPU {i}", 500 * GB, 50_000 * GB, basis="reported by NVML", token_overhead=2e-4)
                  for i in range(gpus))  # fmt: skip
    return MachineSpeed(identity=identity, cpu=cpu_figures(), gpus=cards, measured_at="2026-12-04T18:00:00+00:00")


def keep_figures(home: Path) -> Path:
    """Write this machine's fixed figures into the data folder ``home`` (for a command run with a data folder of its
    own, which would otherwise measure the machine); returns ``home``."""
    from engine.fit.probe import CACHE_NAME, save
    from engine.hardware import detect_hardware

    hardware = detect_hardware()
    home.mkdir(parents=True, exist_ok=True)
    save(machine_figures(hardware.identity, gpus=len(hardware.gpus)), home / CACHE_NAME)
    return home


__all__ = ["cpu_figures", "machine_figures", "keep_figures"]
