"""GGUF on a GPU out of the box: which llama.cpp build `make run` makes, and where a GGUF model runs.

The toolchain and the hardware are faked: a stub ``nvcc`` on PATH, a driver check passed in, and
HardwareInfo values for machines that are not this one.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backend_choice import choose_backend
from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("llama_build", ROOT / "packaging" / "llama_build.py")
llama_build = importlib.util.module_from_spec(spec)
sys.modules["llama_build"] = llama_build
spec.loader.exec_module(llama_build)


@pytest.fixture
def stub_nvcc(tmp_path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8'\n")
    nvcc.chmod(0o755)
    return bin_dir


def which_in(folder: Path):
    return lambda name: str(folder / name) if (folder / name).exists() else None


def choose(env=None, which=lambda name: None, *, driver=False, gpu=False, platform="linux"):
    return llama_build.choose_build(env or {}, which, platform, nvidia_driver=lambda: driver, render_node=lambda: gpu,
                                    default_cuda=None)  # fmt: skip


def test_nvcc_and_a_driver_build_cuda_and_say_why(stub_nvcc):
    got = choose(which=which_in(stub_nvcc), driver=True)
    assert got.backend == "cuda" and str(stub_nvcc / "nvcc") in got.reason and "NVIDIA driver" in got.reason
    env, argv = llama_build.pip_command(got, "/venv/bin/python", "llama-cpp-python==0.3.36")
    assert env["CMAKE_ARGS"].split(" -DCMAKE_C_FLAGS")[0] == "-DGGML_CUDA=on" and argv[-1] == "llama-cpp-python==0.3.36"
    assert "--no-cache-dir" in argv and "--force-reinstall" in argv  # a cached CPU wheel is never reused


def test_a_toolkit_without_a_gpu_keeps_the_cpu_build(stub_nvcc):
    got = choose(which=which_in(stub_nvcc), driver=False)
    assert got.backend == "cpu" and "no NVIDIA driver" in got.reason


def test_cuda_home_and_the_vulkan_sdk_are_found(tmp_path):
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("")
    assert choose({"CUDA_HOME": str(cuda)}, driver=True).backend == "cuda"
    sdk = tmp_path / "vulkan"
    sdk.mkdir()
    vulkan = choose({"VULKAN_SDK": str(sdk)}, gpu=True)
    assert vulkan.backend == "vulkan" and str(sdk) in vulkan.reason
    assert llama_build.pip_command(vulkan, "py", "x")[0]["CMAKE_ARGS"].startswith("-DGGML_VULKAN=on")
    assert choose({"VULKAN_SDK": str(sdk)}, gpu=False).backend == "cpu"
    assert choose({}, driver=True).backend == "cpu"  # a driver without a toolkit: nothing to build with
    assert choose({"CUDA_HOME": str(cuda)}, driver=True, platform="darwin").backend == "cpu"  # Metal


def test_the_override_forces_or_refuses(stub_nvcc):
    assert choose({"HEARTH_LLAMA_GPU": "cpu"}, which_in(stub_nvcc), driver=True).backend == "cpu"
    assert choose({"HEARTH_LLAMA_GPU": "cuda"}, which_in(stub_nvcc)).backend == "cuda"
    with pytest.raises(SystemExit, match="no nvcc was found"):
        choose({"HEARTH_LLAMA_GPU": "cuda"})
    with pytest.raises(SystemExit, match="auto, cpu, cuda or vulkan"):
        choose({"HEARTH_LLAMA_GPU": "rocm"})


def run_script(stub_nvcc, **env_extra) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{stub_nvcc}{os.pathsep}{os.environ['PATH']}", **env_extra}
    env.pop("HEARTH_LLAMA_GPU", None) if "HEARTH_LLAMA_GPU" not in env_extra else None
    return subprocess.run([sys.executable, "packaging/llama_build.py", "--python", sys.executable, "--dry-run"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip


def test_the_dry_run_prints_the_pip_command_it_would_run(stub_nvcc):
    proc = run_script(stub_nvcc, HEARTH_LLAMA_GPU="cuda")
    assert proc.returncode == 0, proc.stderr
    pin = llama_build.llama_pin()
    assert pin.startswith("llama-cpp-python==")
    line = proc.stdout.strip()
    assert line.startswith("llama.cpp: CUDA build") and "CMAKE_ARGS='-DGGML_CUDA=on" in line
    assert f"{sys.executable} -m pip install" in line and line.endswith(pin)


def test_on_a_machine_without_an_nvidia_driver_the_script_changes_nothing(stub_nvcc):
    if llama_build.nvidia_driver_present():
        pytest.skip("this machine has an NVIDIA driver")
    proc = run_script(stub_nvcc)
    assert proc.returncode == 0 and proc.stdout.startswith("llama.cpp: CPU build (") and "pip" not in proc.stdout


def test_x86_builds_leave_the_amx_kernels_out_and_others_get_no_flags():
    flags = llama_build.cpu_cmake_args("x86_64", "linux")
    assert shlex.split(flags) == [f"-DCMAKE_C_FLAGS={llama_build.NO_AMX}", f"-DCMAKE_CXX_FLAGS={llama_build.NO_AMX}"]
    assert llama_build.cpu_cmake_args("AMD64", "darwin") == flags
    assert llama_build.cpu_cmake_args("aarch64", "linux") == llama_build.cpu_cmake_args("arm64", "darwin") == ""
    assert llama_build.cpu_cmake_args("AMD64", "win32") == ""  # MSVC compiles no AMX unless asked
    assert flags in llama_build.pip_command(llama_build.BuildChoice("cuda", "x"), "py", "x")[0]["CMAKE_ARGS"]


def test_the_flags_really_drop_amx_from_a_native_build():
    """What the compiler makes of them: -march=native on this CPU, with and without the flags."""
    gcc = shutil.which("gcc")
    if gcc is None or not llama_build.cpu_cmake_args():
        pytest.skip("no gcc, or not x86-64")

    def macros(*flags: str) -> str:
        return subprocess.run([gcc, "-march=native", *flags, "-dM", "-E", "-"], input="", capture_output=True,
                              text=True, timeout=60).stdout  # fmt: skip

    native, without = macros(), macros(*llama_build.NO_AMX.split())
    assert "__AMX" not in without
    assert ("__AVX2__" in without) == ("__AVX2__" in native)  # the rest of the native instruction sets stays


def test_an_installed_build_with_amx_kernels_is_rebuilt_without_them(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'CPU : AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |'\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HEARTH_LLAMA_GPU"}
    proc = subprocess.run([sys.executable, "packaging/llama_build.py", "--python", str(fake), "--dry-run"],
                          capture_output=True, text=True, cwd=ROOT, env={**env, "HEARTH_LLAMA_GPU": "cpu"},
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert "has AMX kernels" in line and "--no-cache-dir" in line and line.endswith(llama_build.llama_pin())
    if llama_build.cpu_cmake_args():
        assert "-mno-amx-int8" in line


def test_the_llama_cpp_installed_here_has_no_amx_kernels():
    """`make test` and `make run` (packaging/llama_build.py) rebuild one that has them."""
    import llama_cpp

    assert "AMX_INT8 = 1" not in llama_cpp.llama_print_system_info().decode()


def test_the_makefile_gives_the_first_install_the_cpu_flags():
    proc = subprocess.run(["make", "-n", "-p", "-W", "pyproject.toml", "test"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env={k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"})  # fmt: skip
    assert f"CMAKE_ARGS := {llama_build.cpu_cmake_args()}".strip() in proc.stdout
    assert "packaging/llama_build.py --python .venv/bin/python" in proc.stdout


def test_make_run_asks_the_script_which_build_to_make():
    proc = subprocess.run(["make", "-n", "-W", "pyproject.toml", "run"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)  # fmt: skip
    assert "packaging/llama_build.py --python .venv/bin/python" in proc.stdout, proc.stdout + proc.stderr


def machine(*gpus: GpuInfo) -> HardwareInfo:
    return HardwareInfo(os="Linux", cpu=CpuInfo("x", "x86_64", 8, 16), ram_total=64 * GIB, ram_available=60 * GIB,
                        gpus=gpus)  # fmt: skip


H200 = GpuInfo(0, "NVIDIA H200", "nvidia", 141 * GIB, compute_capability="9.0")


def test_gguf_goes_to_the_paged_engine_when_llamacpp_cannot_offload_but_torch_sees_cuda():
    got = choose_backend("gguf", hardware=machine(H200), gpu_offload_supported=False, cuda=True)
    assert got.backend == "paged" and got.gpu_offload
    assert "NVIDIA H200" in got.reason and "no GPU support" in got.reason
    no_hw = choose_backend("gguf", gpu_offload_supported=False, cuda=True)  # the worker's call: no hardware facts
    assert no_hw.backend == "paged"


def test_gguf_stays_on_llamacpp_when_it_can_offload_or_torch_has_no_gpu():
    offload = choose_backend("gguf", hardware=machine(H200), gpu_offload_supported=True, cuda=True)
    assert offload.backend == "llamacpp" and offload.gpu_offload
    cpu_only = choose_backend("gguf", hardware=machine(H200), gpu_offload_supported=False, cuda=False)
    assert cpu_only.backend == "llamacpp" and not cpu_only.gpu_offload and "make run" in cpu_only.reason
    assert choose_backend("gguf", gpu_offload_supported=False, cuda=False).backend == "llamacpp"
    assert choose_backend("gguf", hardware=machine(), cuda=True).backend == "llamacpp"  # no GPU at all
    assert choose_backend("gguf", override="llamacpp", cuda=True, gpu_offload_supported=False).backend == "llamacpp"


def test_this_machine_keeps_gguf_on_llamacpp():
    """No NVIDIA driver here: the worker's choice (no hardware facts) is llama.cpp, as before."""
    if llama_build.nvidia_driver_present():
        pytest.skip("this machine has an NVIDIA driver")
    assert choose_backend("gguf").backend == "llamacpp"
