"""Which llama.cpp build `make run` installs: CUDA where the CUDA toolkit is found, Vulkan where its SDK is.

llama-cpp-python compiles llama.cpp when it is installed, for the CPU unless CMAKE_ARGS asks for a GPU
backend. `make run` calls this script after the usual install: it looks for ``nvcc`` (PATH, CUDA_HOME,
CUDA_PATH, /usr/local/cuda) and for the Vulkan SDK (VULKAN_SDK, or ``glslc`` with the Vulkan headers),
says in one line which build it chose and why, and rebuilds llama-cpp-python with ``GGML_CUDA=on`` or
``GGML_VULKAN=on`` when the installed build lacks that GPU support. Where neither is found it changes
nothing, unless the installed CPU build has llama.cpp's AMX kernels, which crash on some CPUs that have
AMX (ggml-org/llama.cpp#20824): then it rebuilds it without them. Every build on x86-64 leaves them out
(``cpu_cmake_args``, which the Makefile also gives the first install). ``HEARTH_LLAMA_GPU=cpu|cuda|vulkan``
overrides the detection; ``--dry-run`` prints the pip command instead of running it. Standard library
only: it runs before anything else is installed.

    python packaging/llama_build.py --python .venv/bin/python [--dry-run]
    python packaging/llama_build.py --cmake-args   # the CMake arguments of a CPU build, for the Makefile
"""

from __future__ import annotations

import argparse
import os
import platform as platform_module
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CMAKE_FLAGS = {"cuda": "-DGGML_CUDA=on", "vulkan": "-DGGML_VULKAN=on", "cpu": ""}
# A native build on a CPU with AMX compiles llama.cpp's AMX kernels in; GCC and Clang drop an instruction
# set named with -mno-* whatever -march=native says.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def cpu_cmake_args(machine: str | None = None, platform: str = sys.platform) -> str:
    """The CMake arguments every llama.cpp build gets for its CPU code: AMX left out on x86-64 with GCC or
    Clang (MSVC builds no AMX unless asked); nothing elsewhere."""
    machine = (machine or platform_module.machine()).lower()
    if machine not in ("x86_64", "amd64") or platform == "win32":
        return ""
    return f"-DCMAKE_C_FLAGS='{NO_AMX}' -DCMAKE_CXX_FLAGS='{NO_AMX}'"


@dataclass(frozen=True, slots=True)
class BuildChoice:
    """The llama.cpp build for this machine and the reason, in words."""

    backend: str  # "cuda" | "vulkan" | "cpu"
    reason: str
    tool: str | None = None  # the nvcc or glslc that decided it


def find_nvcc(env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which,
              default_root: str | None = "/usr/local/cuda") -> str | None:  # fmt: skip
    """The CUDA compiler: on PATH, else under CUDA_HOME, CUDA_PATH or /usr/local/cuda."""
    found = which("nvcc")
    if found:
        return found
    name = "nvcc.exe" if sys.platform == "win32" else "nvcc"
    for root in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), default_root):
        if root and (Path(root) / "bin" / name).is_file():
            return str(Path(root) / "bin" / name)
    return None


def find_vulkan_sdk(env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The Vulkan SDK: VULKAN_SDK set, or the shader compiler ``glslc`` beside the Vulkan headers."""
    sdk = env.get("VULKAN_SDK")
    if sdk and Path(sdk).is_dir():
        return sdk
    glslc = which("glslc")
    headers = [Path("/usr/include/vulkan/vulkan.h"), Path("/usr/local/include/vulkan/vulkan.h")]
    if glslc and any(h.is_file() for h in headers):
        return glslc
    return None


def nvidia_driver_present() -> bool:
    """An NVIDIA driver is loaded (Linux), or nvidia-smi is on PATH: a CUDA build has a GPU to run on."""
    if sys.platform.startswith("linux"):
        return Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()
    return shutil.which("nvidia-smi") is not None


def gpu_render_node_present() -> bool:
    """A GPU a Vulkan build could use: a DRM render node on Linux; assumed elsewhere."""
    if sys.platform.startswith("linux"):
        return any(Path("/dev/dri").glob("renderD*")) if Path("/dev/dri").is_dir() else False
    return True


def choose_build(
    env: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
    platform: str = sys.platform,
    *,
    nvidia_driver: Callable[[], bool] = nvidia_driver_present,
    render_node: Callable[[], bool] = gpu_render_node_present,
    default_cuda: str | None = "/usr/local/cuda",
) -> BuildChoice:
    """CUDA where nvcc and an NVIDIA driver are found, else Vulkan where its SDK and a GPU are, else the CPU.

    A toolkit alone builds nothing: a CUDA build on a machine without an NVIDIA GPU would only be slower
    to compile. Metal is llama.cpp's default on macOS. ``HEARTH_LLAMA_GPU`` forces a choice (e.g. to build
    a CUDA bundle on a machine without a GPU).
    """
    forced = env.get("HEARTH_LLAMA_GPU", "auto").strip().lower() or "auto"
    if forced not in ("auto", "cpu", "cuda", "vulkan"):
        raise SystemExit(f"HEARTH_LLAMA_GPU must be auto, cpu, cuda or vulkan, not {forced!r}.")
    if forced == "cpu":
        return BuildChoice("cpu", "HEARTH_LLAMA_GPU=cpu asks for the CPU build")
    if platform == "darwin" and forced == "auto":
        return BuildChoice("cpu", "on macOS llama.cpp builds with Metal by default")
    nvcc = find_nvcc(env, which, default_cuda)
    if forced == "cuda":
        if not nvcc:
            raise SystemExit("HEARTH_LLAMA_GPU=cuda, but no nvcc was found; install the CUDA toolkit or set CUDA_HOME.")
        return BuildChoice("cuda", f"HEARTH_LLAMA_GPU=cuda asks for it ({nvcc})", nvcc)
    driver = nvidia_driver()
    if forced == "auto" and nvcc and driver:
        return BuildChoice("cuda", f"the CUDA toolkit ({nvcc}) and an NVIDIA driver are installed", nvcc)
    vulkan = find_vulkan_sdk(env, which)
    if forced == "vulkan":
        if not vulkan:
            raise SystemExit("HEARTH_LLAMA_GPU=vulkan, but no Vulkan SDK was found; install it or set VULKAN_SDK.")
        return BuildChoice("vulkan", f"HEARTH_LLAMA_GPU=vulkan asks for it ({vulkan})", vulkan)
    if vulkan and render_node():
        return BuildChoice("vulkan", f"the Vulkan SDK ({vulkan}) and a GPU are present", vulkan)
    if nvcc:
        return BuildChoice("cpu", f"the CUDA toolkit is installed ({nvcc}) but no NVIDIA driver or GPU was found", nvcc)
    if vulkan:
        return BuildChoice("cpu", f"the Vulkan SDK is installed ({vulkan}) but no GPU was found", vulkan)
    return BuildChoice("cpu", "neither the CUDA toolkit (nvcc) nor the Vulkan SDK was found")


def llama_pin(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The llama-cpp-python requirement Hearth pins, e.g. ``llama-cpp-python==0.3.36``."""
    match = re.search(r'"(llama-cpp-python==[^"]+)"', pyproject.read_text(encoding="utf-8"))
    return match.group(1) if match else "llama-cpp-python"


def pip_command(choice: BuildChoice, python: str, requirement: str) -> tuple[dict[str, str], list[str]]:
    """(extra environment, argv) that rebuild llama-cpp-python for ``choice`` (no cached wheel reused)."""
    env = {"CMAKE_ARGS": f"{CMAKE_FLAGS[choice.backend]} {cpu_cmake_args()}".strip(), "FORCE_CMAKE": "1"}
    argv = [python, "-m", "pip", "install", "--force-reinstall", "--no-deps", "--no-cache-dir",
            "--no-binary", "llama-cpp-python", requirement]  # fmt: skip
    return env, argv


def installed_gpu_support(python: str) -> bool | None:
    """Whether the llama.cpp installed for ``python`` offloads to a GPU (None: not installed or unreadable)."""
    code = "import llama_cpp; print(int(llama_cpp.llama_supports_gpu_offload()))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() == "1" if out.returncode == 0 else None


def installed_amx_kernels(python: str) -> bool:
    """Whether the llama.cpp installed for ``python`` was built with its AMX kernels (False: not installed)."""
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "AMX_INT8 = 1" in out.stdout


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build llama-cpp-python for this machine's GPU toolchain.")
    ap.add_argument("--python", default=sys.executable, help="the Python whose llama-cpp-python to build")
    ap.add_argument("--dry-run", action="store_true", help="print the pip command instead of running it")
    ap.add_argument("--cmake-args", action="store_true", help="print the CMake arguments of a CPU build")
    args = ap.parse_args(argv)
    if args.cmake_args:
        print(cpu_cmake_args())
        return 0
    env = os.environ if env is None else env
    choice = choose_build(env)
    if choice.backend == "cpu":
        if not installed_amx_kernels(args.python):
            print(f"llama.cpp: CPU build ({choice.reason}).")
            return 0
        choice = BuildChoice("cpu", "the installed CPU build has AMX kernels, which crash on some CPUs")
    extra, cmd = pip_command(choice, args.python, llama_pin())
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items()) + " " + shlex.join(cmd)
    if args.dry_run:
        print(f"llama.cpp: {choice.backend.upper()} build, because {choice.reason}; would run: {shown}")
        return 0
    if choice.backend != "cpu" and installed_gpu_support(args.python):
        print(f"llama.cpp: {choice.backend.upper()} build already installed ({choice.reason}).")
        return 0
    print(f"llama.cpp: building with {choice.backend.upper()}, because {choice.reason}: {shown}", flush=True)
    done = subprocess.run(cmd, env={**env, **extra})
    if done.returncode != 0 and choice.backend == "cpu":
        print("llama.cpp: the build without AMX failed; the installed build stays, and Hearth loads "
              "weights unpacked on it.", file=sys.stderr)  # fmt: skip
        return 0  # that build works (slower prompts), so setup goes on
    if done.returncode != 0:
        print(f"llama.cpp: the {choice.backend.upper()} build failed; the CPU build stays installed "
              "(set HEARTH_LLAMA_GPU=cpu to skip this step).", file=sys.stderr)  # fmt: skip
        return done.returncode
    print(f"llama.cpp: built with {choice.backend.upper()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
