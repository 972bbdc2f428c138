"""What this machine has to run models with: GPUs, CPU, memory and disk.

``detect_hardware()`` returns a frozen :class:`HardwareInfo`; ``to_dict()``/``from_dict()`` turn it
into JSON and back, so the server can send it and tests can describe machines that are not here.
NVIDIA GPUs are found through NVML (``nvidia-ml-py``), with ``torch.cuda`` as a fallback only when
torch is installed and a driver seems present; Apple Silicon through ``sysctl``. A machine without
a GPU has an empty ``gpus`` tuple, and :meth:`HardwareInfo.describe_gpu` says so in words.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU. Memory in bytes; ``memory_free`` is None where it cannot be read (Apple)."""

    index: int
    name: str
    vendor: str  # "nvidia" | "apple"
    memory_total: int
    memory_free: int | None = None
    compute_capability: str | None = None
    driver: str | None = None
    unified_memory: bool = False


@dataclass(frozen=True, slots=True)
class CpuInfo:
    """The CPU: its model name, architecture, core counts and the vector extensions that matter."""

    model: str
    arch: str
    cores_physical: int
    cores_logical: int
    features: tuple[str, ...] = ()

    @property
    def avx2(self) -> bool:
        return "avx2" in self.features

    @property
    def avx512(self) -> bool:
        return "avx512" in self.features

    @property
    def neon(self) -> bool:
        return "neon" in self.features


@dataclass(frozen=True, slots=True)
class HardwareInfo:
    """Everything the advisor and the backend choice need to know about a machine."""

    os: str
    cpu: CpuInfo
    ram_total: int
    ram_available: int
    gpus: tuple[GpuInfo, ...] = ()
    disk_free: int | None = None
    models_dir: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def has_nvidia(self) -> bool:
        return any(g.vendor == "nvidia" for g in self.gpus)

    @property
    def apple_silicon(self) -> bool:
        return any(g.vendor == "apple" for g in self.gpus)

    @property
    def best_gpu(self) -> GpuInfo | None:
        """The GPU with the most memory, or None."""
        return max(self.gpus, key=lambda g: g.memory_total, default=None)

    @property
    def identity(self) -> str:
        """What speed figures measured here belong to: the CPU, the RAM and the GPUs (not what is free now).

        Another CPU, more or less RAM, or a GPU added or taken out gives another identity, and the speed model's
        figures are measured again (:func:`engine.fit.probe.machine_speed`).
        """
        gpus = ", ".join(f"{g.name} {round(g.memory_total / GIB)} GiB" for g in self.gpus) or "no GPU"
        c = self.cpu
        return (
            f"{c.model} ({c.arch}, {c.cores_physical}/{c.cores_logical} cores, {'+'.join(c.features) or 'no extensions'}); "
            f"{round(self.ram_total / GIB)} GiB RAM; {gpus}"
        )

    @property
    def gpu_summary(self) -> str:
        """:meth:`describe_gpu`, as GET /api/hardware names it."""
        return self.describe_gpu()

    def describe_gpu(self) -> str:
        """The GPUs in a few words, or a plain statement that there is none."""
        if not self.gpus:
            return "No GPU found: models run on the CPU."
        parts = []
        for g in self.gpus:
            kind = "unified memory" if g.unified_memory else "VRAM"
            parts.append(f"{g.name} ({g.memory_total / GIB:.1f} GiB {kind})")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (bytes as integers): what ``hearth hw --json`` prints and the benchmarks record
        (GET /api/hardware validates its answer from the attributes)."""
        out = asdict(self)
        out["has_gpu"] = self.has_gpu
        out["apple_silicon"] = self.apple_silicon
        out["gpu_summary"] = self.gpu_summary
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareInfo:
        """The inverse of :meth:`to_dict` (derived keys are ignored)."""
        cpu = data["cpu"]
        return cls(
            os=data["os"],
            cpu=CpuInfo(
                model=cpu["model"],
                arch=cpu["arch"],
                cores_physical=int(cpu["cores_physical"]),
                cores_logical=int(cpu["cores_logical"]),
                features=tuple(cpu.get("features", ())),
            ),
            ram_total=int(data["ram_total"]),
            ram_available=int(data["ram_available"]),
            gpus=tuple(GpuInfo(**g) for g in data.get("gpus", ())),
            disk_free=data.get("disk_free"),
            models_dir=data.get("models_dir"),
            notes=tuple(data.get("notes", ())),
        )


# -- detection -----------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _nvml_gpus(notes: list[str]) -> tuple[GpuInfo, ...] | None:
    """NVIDIA GPUs through NVML; None when NVML cannot be used here (no driver, no library)."""
    try:
        import pynvml
    except ImportError:
        notes.append("nvidia-ml-py is not installed, so NVIDIA GPUs are looked for through torch only.")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                cc = f"{major}.{minor}"
            except pynvml.NVMLError:
                cc = None
            gpus.append(
                GpuInfo(
                    index=i,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    vendor="nvidia",
                    memory_total=int(mem.total),
                    memory_free=int(mem.free),
                    compute_capability=cc,
                    driver=driver,
                )
            )
        return tuple(gpus)
    except pynvml.NVMLError as exc:
        notes.append(f"NVML found a driver but could not read the GPUs ({exc}).")
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _nvidia_driver_present() -> bool:
    if sys.platform.startswith("linux"):
        return Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()
    return shutil.which("nvidia-smi") is not None


def _torch_gpus() -> tuple[GpuInfo, ...]:
    """NVIDIA GPUs through torch.cuda, used only where torch is installed and a driver is likely."""
    if "torch" not in sys.modules and (importlib.util.find_spec("torch") is None or not _nvidia_driver_present()):
        return ()
    try:
        import torch

        if not torch.cuda.is_available():
            return ()
        gpus = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            free, total = torch.cuda.mem_get_info(i)
            gpus.append(
                GpuInfo(
                    index=i,
                    name=props.name,
                    vendor="nvidia",
                    memory_total=int(total),
                    memory_free=int(free),
                    compute_capability=f"{props.major}.{props.minor}",
                )
            )
        return tuple(gpus)
    except Exception as exc:  # a broken CUDA install raises RuntimeError/OSError of many kinds
        log.debug("torch.cuda unavailable: %s", exc)
        return ()


def _apple_gpu(ram_total: int) -> GpuInfo | None:
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return None
    chip = _sysctl("machdep.cpu.brand_string") or "Apple Silicon"
    return GpuInfo(index=0, name=f"{chip} GPU", vendor="apple", memory_total=ram_total, unified_memory=True)


def _cpu_features_linux(text: str, arch: str) -> tuple[str, ...]:
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
            break
    found = []
    for name in ("avx", "avx2", "fma", "f16c"):
        if name in flags:
            found.append(name)
    if "avx512f" in flags:
        found.append("avx512")
    if "asimd" in flags or "neon" in flags or arch in ("aarch64", "arm64"):
        found.append("neon")
    return tuple(found)


def _cpu_model_linux(text: str) -> str | None:
    for key in ("model name", "Hardware", "Processor", "cpu model"):
        for line in text.splitlines():
            k, _, value = line.partition(":")
            if k.strip() == key and value.strip():
                return value.strip()
    return None


def _cpu_features_windows() -> tuple[str, ...]:
    try:
        import ctypes

        present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        return ()
    # PF_AVX_INSTRUCTIONS_AVAILABLE=39, PF_AVX2=40, PF_AVX512F=41, PF_ARM_NEON=19
    table = (("avx", 39), ("avx2", 40), ("avx512", 41), ("neon", 19))
    return tuple(name for name, code in table if present(code))


def detect_cpu() -> CpuInfo:
    """The CPU's model, core counts and vector extensions."""
    import psutil

    arch = platform.machine() or "unknown"
    model: str | None = None
    features: tuple[str, ...] = ()
    if sys.platform.startswith("linux"):
        try:
            text = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            text = ""
        model = _cpu_model_linux(text)
        features = _cpu_features_linux(text, arch)
    elif sys.platform == "darwin":
        model = _sysctl("machdep.cpu.brand_string")
        found = []
        if _sysctl("hw.optional.avx2_0") == "1":
            found.append("avx2")
        if _sysctl("hw.optional.avx512f") == "1":
            found.append("avx512")
        if arch == "arm64" or _sysctl("hw.optional.neon") == "1":
            found.append("neon")
        features = tuple(found)
    elif sys.platform == "win32":
        features = _cpu_features_windows()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    return CpuInfo(
        model=model or platform.processor() or arch,
        arch=arch,
        cores_physical=int(physical),
        cores_logical=int(logical),
        features=features,
    )


def detect_gpus(ram_total: int, notes: list[str] | None = None) -> tuple[GpuInfo, ...]:
    """The GPUs Hearth can use: Apple Silicon's, or NVIDIA's through NVML, else through torch."""
    notes = [] if notes is None else notes
    apple = _apple_gpu(ram_total)
    if apple is not None:
        return (apple,)
    gpus = _nvml_gpus(notes)
    if gpus is None:
        gpus = _torch_gpus()
    return gpus


def detect_hardware(models_dir: Path | None = None) -> HardwareInfo:
    """This machine, as it is now (takes well under a second without torch).

    Args:
        models_dir: Where models are stored, for the free-disk figure; defaults to
            :func:`engine.paths.models_dir`.
    """
    import psutil

    from engine.paths import models_dir as default_models_dir

    notes: list[str] = []
    mem = psutil.virtual_memory()
    folder = models_dir or default_models_dir()
    try:
        disk_free: int | None = shutil.disk_usage(folder).free
    except OSError as exc:
        notes.append(f"Could not read the free space in {folder} ({exc}).")
        disk_free = None
    return HardwareInfo(
        os=f"{platform.system()} {platform.release()}".strip(),
        cpu=detect_cpu(),
        ram_total=int(mem.total),
        ram_available=int(mem.available),
        gpus=detect_gpus(int(mem.total), notes),
        disk_free=disk_free,
        models_dir=str(folder),
        notes=tuple(notes),
    )


__all__ = ["GpuInfo", "CpuInfo", "HardwareInfo", "detect_hardware", "detect_cpu", "detect_gpus", "GIB"]
