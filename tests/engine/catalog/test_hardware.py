"""Hardware detection on this machine, its JSON form, and the backend choice it drives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.backend_choice import choose_backend
from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo, detect_hardware


def nvidia_device_present() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/version").exists()


def test_this_machine_is_detected(tmp_path):
    hw = detect_hardware(tmp_path)
    assert hw.ram_total > 0 and 0 < hw.ram_available <= hw.ram_total
    assert hw.cpu.cores_logical >= hw.cpu.cores_physical > 0
    assert hw.cpu.model and hw.cpu.arch
    assert hw.disk_free is not None and hw.disk_free > 0 and hw.models_dir == str(tmp_path)
    if sys.platform.startswith("linux") and not nvidia_device_present():
        assert hw.gpus == ()
        assert not hw.has_gpu
        assert hw.describe_gpu() == "No GPU found: models run on the CPU."
    for gpu in hw.gpus:
        assert gpu.name and gpu.memory_total > 0


def test_hardware_round_trips_through_json(tmp_path):
    hw = detect_hardware(tmp_path)
    again = HardwareInfo.from_dict(json.loads(json.dumps(hw.to_dict())))
    assert again == hw
    data = HardwareInfo(
        os="Test",
        cpu=CpuInfo("X", "x86_64", 8, 16, ("avx2",)),
        ram_total=64 * GIB,
        ram_available=40 * GIB,
        gpus=(GpuInfo(0, "RTX 4090", "nvidia", 24 * GIB, 20 * GIB, "8.9", "550.54"),),
    )
    assert HardwareInfo.from_dict(json.loads(json.dumps(data.to_dict()))) == data
    assert data.to_dict()["has_gpu"] is True and data.cpu.avx2 and not data.cpu.avx512


def test_hearth_hw_json_says_plainly_what_is_here(tmp_path):
    env = {**os.environ, "HEARTH_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "engine.cli", "hw", "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ram_total"] > 0 and data["cpu"]["cores_logical"] > 0
    assert data["backends"]["gguf"]["backend"] == "llamacpp"
    if sys.platform.startswith("linux") and not nvidia_device_present():
        assert data["gpus"] == [] and data["gpu_summary"].startswith("No GPU found")
        assert data["backends"]["gguf"]["gpu"] is False


def _machine(gpus=(), ram_gb=32):
    return HardwareInfo(os="Test", cpu=CpuInfo("X", "x86_64", 8, 16), ram_total=ram_gb * GIB, ram_available=ram_gb * GIB, gpus=gpus)


def test_backend_choice_names_the_gpu_and_says_why():
    nvidia = _machine((GpuInfo(0, "RTX 4090", "nvidia", 24 * GIB),))
    offload = choose_backend("gguf", hardware=nvidia, gpu_offload_supported=True)
    assert offload.backend == "llamacpp" and offload.gpu_offload and "RTX 4090" in offload.reason
    no_build = choose_backend("gguf", hardware=nvidia, gpu_offload_supported=False)
    assert not no_build.gpu_offload and "no GPU support" in no_build.reason
    cpu = choose_backend("gguf", hardware=_machine())
    assert not cpu.gpu_offload and "no GPU" in cpu.reason
    paged = choose_backend("safetensors", hardware=nvidia)
    assert paged.backend == "paged" and paged.gpu_offload
    apple = _machine((GpuInfo(0, "Apple M2 GPU", "apple", 16 * GIB, unified_memory=True),), ram_gb=16)
    assert choose_backend("safetensors", hardware=apple).backend == "mlx"
    assert "Metal" in choose_backend("gguf", hardware=apple).reason
    assert choose_backend("gguf", override="llamacpp").reason == "chosen by you"
