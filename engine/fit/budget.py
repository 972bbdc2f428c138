"""How much memory a load may take: usable RAM, and usable memory on each GPU, with headroom.

Two views of one machine. ``live=True`` is what a loader has now: available RAM and each GPU's
free memory (from NVML). ``live=False`` is the machine at rest, what the advisor judges a
download by: total RAM and each GPU's total memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.hardware import GIB, HardwareInfo

RAM_USABLE_SHARE = 0.80  # of total RAM (the OS and other apps keep the rest)
RAM_LIVE_SHARE = 0.85  # of RAM available now
GPU_HEADROOM_BYTES = 1 * GIB  # left free on each GPU (llama.cpp's own fitting keeps the same margin)
GPU_MAX_SHARE = 0.95
UNIFIED_GPU_SHARE = 0.75  # of an Apple Silicon Mac's RAM that Metal lets the GPU wire


@dataclass(frozen=True, slots=True)
class DeviceBudget:
    """Bytes one device may hold for a load."""

    device: str  # "cpu", "gpu0", "gpu1"...
    name: str
    usable: int
    unified: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "name": self.name, "usable_bytes": self.usable, "unified": self.unified}


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """RAM and every GPU a load may use; ``gpu_offload`` says whether the backend can use the GPUs."""

    ram: DeviceBudget
    gpus: tuple[DeviceBudget, ...] = ()
    gpu_offload: bool = False

    @property
    def unified(self) -> bool:
        return any(g.unified for g in self.gpus)

    @property
    def usable_gpus(self) -> tuple[DeviceBudget, ...]:
        return self.gpus if self.gpu_offload else ()

    @classmethod
    def from_hardware(cls, hw: HardwareInfo, *, live: bool, gpu_offload: bool = True) -> MemoryBudget:
        """The budget on ``hw``: now (``live``) or at rest."""
        ram_usable = int(hw.ram_available * RAM_LIVE_SHARE) if live else int(hw.ram_total * RAM_USABLE_SHARE)
        gpus = []
        for g in hw.gpus:
            if g.unified_memory:
                usable = int(hw.ram_total * UNIFIED_GPU_SHARE)
                if live:
                    usable = min(usable, ram_usable)
                gpus.append(DeviceBudget(f"gpu{g.index}", g.name, usable, unified=True))
                continue
            base = g.memory_free if live and g.memory_free is not None else g.memory_total
            usable = max(0, min(base - GPU_HEADROOM_BYTES, int(base * GPU_MAX_SHARE)))
            gpus.append(DeviceBudget(f"gpu{g.index}", g.name, usable))
        return cls(DeviceBudget("cpu", "RAM", ram_usable), tuple(gpus), gpu_offload=gpu_offload and bool(gpus))

    @classmethod
    def ram_only(cls, usable: int) -> MemoryBudget:
        """A CPU-only budget of ``usable`` bytes (tests, and `hearth fit --memory`)."""
        return cls(DeviceBudget("cpu", "RAM", int(usable)))

    def to_dict(self) -> dict[str, Any]:
        return {"ram": self.ram.to_dict(), "gpus": [g.to_dict() for g in self.gpus], "gpu_offload": self.gpu_offload}


__all__ = ["DeviceBudget", "MemoryBudget", "RAM_USABLE_SHARE", "GPU_HEADROOM_BYTES", "UNIFIED_GPU_SHARE"]
