"""Measuring this machine once for the speed model: memory bandwidth, a matrix product, llama.cpp's kernels.

The probe is short and repeated, and keeps the fastest of its rounds: other programs share the cores, and a
round they interrupt measures them, not the machine. Its parts:

- memory bandwidth: each core sums an array of its own, larger than the caches (numpy releases the GIL);
- a dense 32-bit matrix product (numpy's BLAS), the rate attention's products run at;
- llama.cpp's kernels, one small GGUF model per tensor type (random blocks whose 16-bit scales are spread as a real
  model's: on x86 llama.cpp turns each scale into 32 bits through a 256 KiB table, so one repeated scale runs
  faster than a real model's many):
  one token's decode over weights larger than the caches (the bytes a single-row product reads per second, the
  repacked layouts llama.cpp makes for AVX2, AVX-512 and NEON included), and a block of prompt rows (operations
  per second), and the same block through an MoE model whose feed-forward layers are experts (llama.cpp runs
  each expert's rows as a product of its own, ``MUL_MAT_ID``, slower than a dense product of the same rows),
  alternating between types round by round; a tiny model of 1 and of 9 layers gives the fixed cost of a token and
  of a layer;
- NVIDIA GPUs: the bandwidth NVML reports (memory clock x bus width), checked with a copy where torch is present.

:func:`machine_speed` keeps the figures in ``machine_speed.json`` with the hardware identity they belong to
(:attr:`engine.hardware.HardwareInfo.identity`) and measures again when that changes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.fit.speed import ATTENTION_KERNEL, KV_KERNEL, DeviceSpeed, KernelSpeed, MachineSpeed

if TYPE_CHECKING:
    from engine.hardware import GpuInfo, HardwareInfo

log = logging.getLogger(__name__)

CACHE_NAME = "machine_speed.json"
CACHE_VERSION = 3  # 2: the kernels' expert-product rates; 3: blocks with a real model's spread of scales
PROBE_TYPES = ("F16", "Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_0", "Q4_1", "IQ4_NL", "Q3_K", "Q2_K")
PROBE_BYTES = 64 * 1024**2  # per type's decode model: past the last-level cache of most CPUs, so decode reads memory
PROMPT_WIDTH = 512  # the prompt model's: 8 M weights, a block of rows in some 10 ms
PROMPT_ROWS = 64
# The expert-product probe: the prompt model's attention with MoE feed-forward layers of this many experts (each as
# wide as the model), this many a row.
PROBE_EXPERTS = 8
PROBE_EXPERTS_USED = 4
ROUNDS = 3
# Scaling one thread's figures to the loop's threads: prompt products split by rows and scale almost fully; the
# fixed costs of a token and a layer grow with the barriers where threads wait for each other.
THREAD_SCALING = 0.9
SYNC_FACTOR = 1.5
# With several threads, the share of the smaller of a decode's two costs (the kernel's work split over the threads,
# reading memory) that is not hidden behind the larger: fitted to llama-bench's decode of the starter in five formats
# on a 2-core AVX-512 CPU (Q4_1 147, Q4_0 173, IQ4_NL 181, Q4_K_M 152, Q8_0 156 tok/s; see docs/fit.md).
UNHIDDEN = 0.5
# Of what NVML reports (memory clock x bus width), what a kernel streams in practice when torch cannot check it.
GPU_STREAM_SHARE = 0.8
# A GPU's 16-bit product rate per byte/s of its bandwidth, where torch cannot measure it (datacenter and gaming
# cards alike run 100-250 operations per byte read).
GPU_FLOPS_PER_BYTE = 120.0
# The blocks' 16-bit scales: log-normal around SCALE with a real model's spread (the starter's tensors: 0.2-0.4 in the
# logarithm, some 400-1,200 distinct values a tensor). llama.cpp's kernels run slower on varied scales than on one
# repeated value: the starter's exact tensors with every scale the same decode in 7.1 ms a token on one thread, with
# scales spread as here in 10.4-10.7 ms, the starter itself in 10.4-11.3.
SCALE = 0.001
SCALE_SPREAD = 0.35
MIN_RATIO = -7.5  # a Q4_1 or Q5_1 block's minimum against its scale (the starter's median)
# The attention probe: a 16-bit model this wide (heads of 64), read with this many tokens in its cache.
ATTENTION_WIDTH = 512
ATTENTION_DEPTH = 1024
# Offsets of the 16-bit scales in each block (the rest are quants; random bytes there are valid values).
_F16_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
}  # fmt: skip


# -- CPU: bandwidth and a dense product ------------------------------------------------------------


def measure_bandwidth(*, threads: int, array_bytes: int = 64 * 1024**2, rounds: int = 7) -> float:
    """Bytes per second the cores read from memory: ``threads`` together by the clock (the fastest round), or one
    core by its CPU time, whichever is more (other programs slow the first, and one core may not be all there is)."""
    import numpy as np

    arrays = [np.ones(array_bytes // 4, dtype=np.float32) for _ in range(threads)]
    together = alone = 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(rounds):
            start = time.perf_counter()
            list(pool.map(lambda a: float(a.sum()), arrays))
            together = max(together, threads * array_bytes / (time.perf_counter() - start))
            cpu = time.thread_time()
            float(arrays[0].sum())
            alone = max(alone, array_bytes / max(1e-9, time.thread_time() - cpu))
    return max(together, alone)


def measure_matmul(*, n: int = 384, rounds: int = 5) -> float:
    """Operations per second of an ``n`` x ``n`` 32-bit matrix product (numpy's BLAS, its threads; the best round):
    attention's rate where llama.cpp's own 16-bit product is not measured."""
    import numpy as np

    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        _ = a @ a
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / max(1e-9, best)


# -- CPU: llama.cpp's kernels ------------------------------------------------------------------------


def _blocks(type_name: str, rows: int, cols: int, rng: Any) -> Any:
    """Random raw blocks of ``type_name`` for a [rows, cols] weight, with small 16-bit scales spread as a real
    model's are (``SCALE_SPREAD``)."""
    import gguf
    import numpy as np

    if type_name == "F16":
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)
    kind = gguf.GGMLQuantizationType[type_name]
    block, size = gguf.GGML_QUANT_SIZES[kind]
    n = rows * cols // block
    pattern = rng.integers(0, 256, size=(min(n, 4096), size), dtype=np.uint8)
    data = np.resize(pattern, (n, size))  # repeated: what is read is the same amount, and writing it is quick
    scales = SCALE * np.exp(rng.normal(0.0, SCALE_SPREAD, n))
    for i, offset in enumerate(_F16_FIELDS.get(type_name, ())):
        # a block's second 16-bit field is its minimum: Q4_1's and Q5_1's a negative offset (-7.5 x the scale in
        # the starter), the K-quants' a positive one
        field = scales if i == 0 else scales * (MIN_RATIO if type_name in ("Q4_1", "Q5_1") else -MIN_RATIO)
        data[:, offset : offset + 2] = field.astype(np.float16).view(np.uint8).reshape(n, 2)
    return data.reshape(rows, cols // block * size)


def _width(type_name: str, target: int, layers: int) -> int:
    """The model width whose layers (4 x width² of attention, 3 x 4 x width² of feed-forward) take ``target`` bytes."""
    from engine.fit.speed import TYPE_BITS

    per_weight = TYPE_BITS[type_name] / 8
    width = math.sqrt(target / (16 * layers * per_weight))
    return max(256, int(width) // 256 * 256)


def write_probe_model(
    path: Path, type_name: str, *, width: int, layers: int, vocab: int = 512, head_dim: int = 128, experts: int = 0,
    experts_used: int = 0,
) -> int:
    """A loadable llama-shaped GGUF of ``type_name`` weights; returns the bytes of its layers. With ``experts`` its
    feed-forward layers are an MoE's (``experts`` of ``width``, ``experts_used`` a token; a 32-bit router)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    heads = max(1, width // head_dim)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("hearth-probe")
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(width)
    w.add_feed_forward_length(width if experts else 4 * width)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(experts_used)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("llama")
    words = [f"\u2581w{i}".encode() for i in range(vocab - 259)]
    w.add_token_list([b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)] + words)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(words))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_tensor("token_embd.weight", _blocks("F16", vocab, width, rng))
    layer_bytes = 0
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(width, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(width, dtype=np.float32))
        ffn = (("ffn_gate", 4 * width, width), ("ffn_up", 4 * width, width), ("ffn_down", width, 4 * width))
        if experts:
            w.add_tensor(p + "ffn_gate_inp.weight", rng.standard_normal((experts, width), dtype=np.float32))
            ffn = (("ffn_gate_exps", experts * width, width), ("ffn_up_exps", experts * width, width),
                   ("ffn_down_exps", experts * width, width))  # fmt: skip
        for name, rows, cols in (("attn_q", width, width), ("attn_k", width, width), ("attn_v", width, width),
                                 ("attn_output", width, width), *ffn):  # fmt: skip
            data = _blocks(type_name, rows, cols, rng)
            layer_bytes += data.nbytes
            if experts and name.endswith("_exps"):
                data = data.reshape(experts, width, -1)  # [experts, rows, cols]
            if type_name == "F16":
                w.add_tensor(p + name + ".weight", data)
            else:
                w.add_tensor(p + name + ".weight", data, raw_dtype=gguf.GGMLQuantizationType[type_name])
    w.add_tensor("output_norm.weight", np.ones(width, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return layer_bytes


class _Probe:
    """One loaded probe model on one thread: a token's decode and a block of prompt rows, in CPU seconds.

    The thread's CPU time, not the clock: on a machine other programs keep busy, the clock measures them too, while
    a single thread's CPU time is what the work took whenever it ran (two threads would spin at every barrier
    waiting for the other to be scheduled, and that spinning is CPU time as well).
    """

    def __init__(self, path: Path, *, rows: int, n_ctx: int = 512) -> None:
        import llama_cpp

        self.rows = rows
        self.llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=rows, n_ubatch=rows, n_threads=1, n_threads_batch=1,
                                   flash_attn=True, verbose=False)  # fmt: skip
        self.llm.eval([5] * 4)  # the first call builds the graph and touches every page

    def decode(self, tokens: int = 6, *, depth: int = 2) -> float:
        """The fastest token's CPU seconds with ``depth`` tokens in the cache."""
        self.llm.reset()
        self.llm.eval([5] * depth)
        best = math.inf
        for _ in range(tokens):
            start = time.thread_time()
            self.llm.eval([7])
            best = min(best, time.thread_time() - start)
        return best

    def prompt(self, *, depth: int = 0) -> float:
        """A block of prompt rows' CPU seconds after ``depth`` tokens."""
        self.llm.reset()
        if depth:
            self.llm.eval([5] * depth)
        # tokens of their own, so that an MoE's router spreads the rows over its experts as a real prompt's
        tokens = [3 + i * 37 % 500 for i in range(self.rows)]
        start = time.thread_time()
        self.llm.eval(tokens)
        return time.thread_time() - start

    def close(self) -> None:
        self.llm.close()


PROBE_PREFIX = "hearth-probe-"
STALE_PROBE_S = 3600.0  # a leftover folder without a process id in its name, after this long, is no one's


def _probe_folder(parent: Path | None) -> Path:
    """A fresh folder for this process's probe models under ``parent`` (the temporary folder by default), once the
    ones that stopped processes left there are removed: a probe measures on a thread of its own, and a worker that
    exits or is killed meanwhile ends it before its cleanup runs."""
    import psutil

    parent = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    for old in parent.glob(f"{PROBE_PREFIX}*"):
        pid = old.name.removeprefix(PROBE_PREFIX).split("-", 1)[0]
        try:
            stale = not psutil.pid_exists(int(pid)) if pid.isdigit() else time.time() - old.stat().st_mtime > STALE_PROBE_S
        except OSError:
            continue
        if stale and old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{PROBE_PREFIX}{os.getpid()}-", dir=parent))


def _forget(path: Path) -> None:
    """Remove a probe model once llama.cpp has it open: it maps the file, which keeps its pages until it is closed, so
    on POSIX no file is left behind however the process ends. Windows keeps an open file; the folder's removal gets it."""
    if os.name != "nt":
        path.unlink(missing_ok=True)


def measure_kernels(
    *, threads: int, types: Sequence[str] = PROBE_TYPES, target_bytes: int = PROBE_BYTES, rounds: int = ROUNDS,
    rows: int = PROMPT_ROWS, prompt_width: int = PROMPT_WIDTH, folder: Path | None = None, bandwidth: float = math.inf,
    depth: int = ATTENTION_DEPTH, check: Path | None = None,
) -> tuple[tuple[KernelSpeed, ...], float, float]:
    """llama.cpp's rates per tensor type on this CPU with ``threads`` threads, and its fixed costs of a token and of
    a layer (seconds). Each is measured on one thread and scaled; decoding stops at ``bandwidth``. With ``check``
    (a real model: the starter) its decode is measured too, and the types' decode rates scaled by what it took
    against what they predict for it (x 1.07 here; before the blocks' scales were spread as a real model's, one
    repeated value made them run 1.4x as fast as real weights, and this factor was 0.73).

    Each type gets a model larger than the caches for decoding (reading memory is the cost) and a small one for
    prompt rows (compute is the cost, and a short run is less often interrupted).

    Raises:
        ImportError: llama.cpp (llama-cpp-python) or the gguf library is not installed.
    """
    import llama_cpp  # noqa: F401  (fail before writing anything)

    layers = 2
    root = _probe_folder(folder)
    loaded: list[_Probe] = []

    def load(name: str, type_name: str, width: int, n: int) -> tuple[_Probe, int]:
        path = root / f"{name}.gguf"
        size = write_probe_model(path, type_name, width=width, layers=n)
        loaded.append(_Probe(path, rows=rows))
        _forget(path)
        return loaded[-1], size

    try:
        tiny = {n: load(f"tiny-{n}", "F16", 128, n)[0] for n in (1, 9)}  # what a token and a layer cost
        # attention: a small model's token and prompt block with nothing, and with ATTENTION_DEPTH tokens, before
        write_probe_model(root / "attention.gguf", "F16", width=ATTENTION_WIDTH, layers=layers, head_dim=64)
        attention = _Probe(root / "attention.gguf", rows=rows, n_ctx=2 * depth)
        loaded.append(attention)
        _forget(root / "attention.gguf")
        real = _Probe(check, rows=rows) if check is not None else None
        if real is not None:
            loaded.append(real)
        big = {t: load(f"{t}-decode", t, _width(t, target_bytes, layers), layers) for t in types}
        small = {t: load(f"{t}-prompt", t, prompt_width, layers)[0] for t in types}
        moe: dict[str, _Probe] = {}
        for t in types:
            write_probe_model(root / f"{t}-experts.gguf", t, width=prompt_width, layers=layers,
                              experts=PROBE_EXPERTS, experts_used=PROBE_EXPERTS_USED)  # fmt: skip
            moe[t] = _Probe(root / f"{t}-experts.gguf", rows=rows)
            loaded.append(moe[t])
            _forget(root / f"{t}-experts.gguf")
        best: dict[str, float] = {}

        def keep(key: str, seconds: float) -> None:
            best[key] = min(best.get(key, math.inf), seconds)

        for _ in range(rounds):  # round by round, so a disturbance falls on every type alike
            for n, p in tiny.items():
                keep(f"tiny{n}", p.decode())
            keep("attn_decode0", attention.decode())
            keep("attn_decode", attention.decode(depth=depth))
            keep("attn_prompt0", attention.prompt())
            keep("attn_prompt", attention.prompt(depth=depth))
            if real is not None:
                keep("real", real.decode())
            for t in types:
                keep(f"decode{t}", big[t][0].decode())
                keep(f"prompt{t}", small[t].prompt())
                keep(f"experts{t}", moe[t].prompt())
    finally:
        for p in loaded:
            p.close()
        shutil.rmtree(root, ignore_errors=True)
    layer_cost = max(0.0, (best["tiny9"] - best["tiny1"]) / 8)
    token_cost = max(0.0, best["tiny1"] - layer_cost)
    base = token_cost + layers * layer_cost
    factor = 1.0
    if check is not None:
        factor = _real_weights_factor(check, best["real"], {t: big[t][1] / max(1e-6, best[f"decode{t}"] - base) for t in types},
                                      token_cost, layer_cost)  # fmt: skip
    kernels = []
    for t in types:
        one_decode = factor * big[t][1] / max(1e-6, best[f"decode{t}"] - base)
        one_prompt = 2 * 16 * layers * prompt_width**2 * rows / best[f"prompt{t}"]
        # the MoE model's block less its attention (a quarter of the dense model's products, at their rate): its
        # experts' products, 3 of width² for each expert a row runs
        attention = 2 * 4 * layers * prompt_width**2 * rows / one_prompt
        expert_ops = 2 * 3 * PROBE_EXPERTS_USED * layers * prompt_width**2 * rows
        one_experts = expert_ops / max(1e-6, best[f"experts{t}"] - attention)
        # One thread's rate is what it measured. More threads share the kernel's work but not the memory's
        # bandwidth, and their streams contend: the larger of the two costs plus part of the smaller.
        work, reading = 1 / (threads * one_decode), 1 / bandwidth
        contention = UNHIDDEN * min(work, reading) if threads > 1 else 0.0
        scaling = threads * THREAD_SCALING if threads > 1 else 1.0
        kernels.append(KernelSpeed(t, 1 / (max(work, reading) + contention), one_prompt * scaling, one_experts * scaling))
    # the cache's 16-bit keys and values a decoded token reads at depth, and the prompt rows' attention operations
    cache = 2 * layers * ATTENTION_WIDTH * 2 * depth
    one_kv = cache / max(1e-6, best["attn_decode"] - best["attn_decode0"])
    work, reading = 1 / (threads * one_kv), 1 / bandwidth
    contention = UNHIDDEN * min(work, reading) if threads > 1 else 0.0
    kernels.append(KernelSpeed(KV_KERNEL, 1 / (max(work, reading) + contention), math.inf))
    ops = 4 * ATTENTION_WIDTH * layers * rows * (depth + rows / 2)
    one_attn = ops / max(1e-6, best["attn_prompt"] - best["attn_prompt0"])
    kernels.append(KernelSpeed(ATTENTION_KERNEL, math.inf, one_attn * (threads * THREAD_SCALING if threads > 1 else 1.0)))
    sync = SYNC_FACTOR if threads > 1 else 1.0
    return tuple(kernels), token_cost * sync, layer_cost * sync


def _real_weights_factor(path: Path, measured: float, rates: dict[str, float], token: float, layer: float) -> float:
    """What one thread's decode rates are worth on real weights: the starter's measured token against the token
    they predict for it (at most 1.5x either way, so a disturbed measurement cannot make them absurd)."""
    from engine.fit.facts import facts_from_gguf
    from engine.fit.speed import LOOP_SECONDS, estimate_speed

    one = DeviceSpeed("cpu", "one thread", math.inf, math.inf, tuple(KernelSpeed(t, r, math.inf) for t, r in rates.items()),
                      token_overhead=token, layer_overhead=layer)  # fmt: skip
    # llama.cpp's token alone: the probe decodes in llama.cpp, without Hearth's loop around it
    predicted = 1 / estimate_speed(facts_from_gguf(path), MachineSpeed("", one), depth=2).decode_tok_s - LOOP_SECONDS
    factor = min(1.5, max(1 / 1.5, predicted / max(1e-9, measured)))
    log.info("the starter decodes in %.2f ms on one thread, the random blocks predict %.2f ms: rates x %.2f",
             measured * 1e3, predicted * 1e3, factor)
    return factor


# -- GPUs --------------------------------------------------------------------------------------------


def nvml_bandwidths() -> dict[int, float]:
    """Each NVIDIA GPU's peak memory bandwidth as NVML reports it (bytes/s), by index; empty without NVML."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}
    out = {}
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)  # MHz
                bus = pynvml.nvmlDeviceGetMemoryBusWidth(handle)  # bits
            except pynvml.NVMLError:
                continue
            out[i] = clock * 1e6 * 2 * bus / 8  # double data rate
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return out


def torch_gpu_rates(index: int) -> tuple[float, float] | None:
    """A GPU's copy bandwidth and 16-bit product rate measured with torch, or None where torch cannot."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    dev = torch.device("cuda", index)
    src = torch.empty(256 * 1024**2, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    a = torch.randn(4096, 4096, dtype=torch.float16, device=dev)
    copy, mm = math.inf, math.inf
    for _ in range(5):
        torch.cuda.synchronize(dev)
        start = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize(dev)
        copy = min(copy, time.perf_counter() - start)
        start = time.perf_counter()
        _ = a @ a
        torch.cuda.synchronize(dev)
        mm = min(mm, time.perf_counter() - start)
    return 2 * src.numel() / copy, 2 * 4096**3 / mm  # a copy reads and writes each byte


def gpu_speeds(
    gpus: Sequence[GpuInfo],
    cpu: DeviceSpeed,
    *,
    reported: dict[int, float] | None = None,
    measure: Callable[[int], tuple[float, float] | None] | None = torch_gpu_rates,
) -> tuple[DeviceSpeed, ...]:
    """Each NVIDIA GPU's rates: the bandwidth NVML reports (``reported`` by index; asked when None), checked by
    ``measure`` (torch's copy and product; None: not checked); Apple's unified memory is the CPU's."""
    reported = nvml_bandwidths() if reported is None else reported
    out = []
    for g in gpus:
        name = f"gpu{g.index}"
        if g.unified_memory:
            out.append(DeviceSpeed(name, g.name, cpu.bandwidth, cpu.flops * 4, basis="measured (unified memory)"))
            continue
        measured = measure(g.index) if measure is not None else None
        peak = reported.get(g.index)
        if measured is not None:
            bw, flops = measured
            basis = f"measured (NVML reports {peak / 1e9:,.0f} GB/s)" if peak else "measured"
        elif peak is not None:
            bw, flops, basis = peak * GPU_STREAM_SHARE, peak * GPU_FLOPS_PER_BYTE, "reported by NVML"
        else:
            continue
        # a GPU kernel streams quantized weights at its bandwidth: one kernel rate for every type
        out.append(DeviceSpeed(name, g.name, bw, flops, basis=basis, token_overhead=2e-4, layer_overhead=1e-5))
    return tuple(out)


# -- the cache ---------------------------------------------------------------------------------------


def probe_machine(hardware: HardwareInfo, *, kernels: bool = True, threads: int | None = None) -> MachineSpeed:
    """Measure ``hardware`` (this machine): a few seconds with llama.cpp's kernels, well under one without."""
    from engine.backends.llamacpp.backend import default_threads

    n = threads or default_threads()
    bandwidth = measure_bandwidth(threads=n)
    flops = measure_matmul()
    found: tuple[KernelSpeed, ...] = ()
    token_cost = layer_cost = 0.0
    if kernels:
        try:
            from engine.starter import starter_model_path

            found, token_cost, layer_cost = measure_kernels(threads=n, bandwidth=bandwidth, check=starter_model_path())
            flops = next((k.prompt_rate for k in found if k.type == ATTENTION_KERNEL), flops)
        except ImportError as exc:
            log.info("llama.cpp's kernels not measured (%s); its types are judged by memory bandwidth", exc)
    cpu = DeviceSpeed("cpu", hardware.cpu.model, bandwidth, flops, kernels=found, basis="measured",
                      token_overhead=token_cost, layer_overhead=layer_cost)  # fmt: skip
    return MachineSpeed(
        identity=hardware.identity, cpu=cpu, gpus=gpu_speeds(hardware.gpus, cpu), measured_at=datetime.now(UTC).isoformat(timespec="seconds")
    )


def _cache_path() -> Path:
    from engine.paths import hearth_home

    return hearth_home() / CACHE_NAME


def load_cached(identity: str, path: Path | None = None) -> MachineSpeed | None:
    """The figures kept for the hardware called ``identity``, or None (none kept, another machine, unreadable)."""
    path = path or _cache_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != CACHE_VERSION or data.get("identity") != identity:
            return None
        return MachineSpeed.from_dict(data["speed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(speed: MachineSpeed, path: Path | None = None) -> None:
    path = path or _cache_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "identity": speed.identity, "speed": speed.to_dict()}, indent=1))
    tmp.replace(path)


def machine_speed(
    hardware: HardwareInfo,
    *,
    probe: Callable[[HardwareInfo], MachineSpeed] = probe_machine,
    path: Path | None = None,
    refresh: bool = False,
) -> MachineSpeed:
    """This machine's rates: kept ones when measured on the same hardware, else measured now and kept."""
    if not refresh:
        cached = load_cached(hardware.identity, path)
        if cached is not None:
            return cached
    log.info("measuring this machine's speed for the speed model (hardware: %s)", hardware.identity)
    speed = probe(hardware)
    try:
        save(speed, path)
    except OSError as exc:
        log.warning("could not keep the measured speed figures (%s)", exc)
    return speed


_probing = threading.Lock()


def speed_for(hardware: HardwareInfo, *, wait: bool = False) -> MachineSpeed | None:
    """The rates for ``hardware``: kept ones, else (when it is this machine) measured now. ``wait=False`` measures
    in a thread of its own and answers None meanwhile, so that a page asking is not held up for the seconds a probe
    takes; None too for another machine (a description of one that is not here cannot be measured)."""
    cached = load_cached(hardware.identity)
    if cached is not None:
        return cached
    from engine.hardware import detect_hardware

    if hardware.identity != detect_hardware().identity:
        return None
    if wait:
        with _probing:  # one probe at a time: two would measure each other
            try:
                return load_cached(hardware.identity) or machine_speed(hardware)
            except Exception:  # a probe that breaks leaves speed out, as it does measuring in the background
                log.exception("measuring this machine's speed failed")
                return None
    if _probing.acquire(blocking=False):
        def measure() -> None:
            try:
                machine_speed(hardware)
            except Exception:  # a probe that breaks leaves speed out, as before it was measured
                log.exception("measuring this machine's speed failed")
            finally:
                _probing.release()

        threading.Thread(target=measure, name="speed-probe", daemon=True).start()
    return None


__all__ = [
    "speed_for",
    "machine_speed", "probe_machine", "load_cached", "save", "measure_bandwidth", "measure_matmul", "measure_kernels",
    "gpu_speeds", "nvml_bandwidths", "write_probe_model", "PROBE_TYPES",
]  # fmt: skip
