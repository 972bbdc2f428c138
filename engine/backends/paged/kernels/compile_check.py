"""Compile every Triton kernel variant the engine can launch to a cubin, for NVIDIA GPUs, without one.

The host wrappers run on ``meta`` tensors under :func:`launch.recording` for each dtype, KV-cache
dtype and model shape the engine serves, so the variants are exactly what the engine would launch
(constexprs, argument dtypes); each distinct one is compiled by Triton for each architecture with
the ``ptxas`` its wheel ships. Triton rejects here what the GPU would (a 16-bit ``tl.dot`` with a
reduction below 16, too much shared memory), so a kernel that cannot run on the GPU fails here.

    python -m engine.backends.paged.kernels.compile_check --arch sm_80,sm_90

Prints one line per variant and architecture and exits non-zero if any fails.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch

# (name, heads, kv_heads, head_dim, hidden, intermediate): the head sizes and groupings of the families
# served; models the kernels do not serve (capability.triton_serves) run on the torch ops and are skipped
SHAPES = (
    ("SmolLM2-135M", 9, 3, 64, 576, 1536),
    ("Qwen2.5-0.5B", 14, 2, 64, 896, 4864),
    ("Qwen3-0.6B", 16, 8, 128, 1024, 3072),
    ("Llama-3.2-1B", 32, 8, 64, 2048, 8192),
    ("Llama-3.1-8B", 32, 8, 128, 4096, 14336),
    ("head_dim 80", 32, 32, 80, 2560, 10240),
    ("head_dim 96", 32, 32, 96, 3072, 8192),
    ("group 32", 32, 1, 128, 4096, 11008),
    ("head_dim 256", 8, 4, 256, 2048, 16384),
)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
BLOCK_SIZES = (16, 32)
_TRITON_TYPES = {
    torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv",
    torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8", torch.int8: "i8",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Variant:
    """One compilable kernel specialization: where the kernel lives, its signature and its constexprs."""

    module: str
    kernel: str
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, object], ...]

    def describe(self) -> str:
        ptrs = ",".join(sorted({t[1:] for _, t in self.signature if t.startswith("*") and t[1:] not in ("i32", "i64")}))
        consts = " ".join(f"{k}={v}" for k, v in self.constexprs)
        return f"{self.kernel} [{ptrs}] {consts}"


def _arg_type(value) -> str:
    if isinstance(value, torch.Tensor):
        return "*" + _TRITON_TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for {type(value).__name__}")


def _variant(launch) -> Variant:
    fn = launch.kernel
    consts = dict(launch.constexprs)
    names = list(fn.arg_names)
    runtime = [n for n in names if n not in consts]
    if len(runtime) != len(launch.args):
        raise TypeError(f"{fn.__name__}: {len(launch.args)} arguments for {len(runtime)} parameters")
    types = dict(zip(runtime, map(_arg_type, launch.args), strict=True))
    signature = tuple((n, types.get(n, "constexpr")) for n in names)
    return Variant(fn.fn.__module__, fn.fn.__name__, signature, tuple(sorted(consts.items())))


def engine_variants(capability: tuple[int, int]) -> list[Variant]:
    """Every distinct kernel launch of the engine's configurations on GPUs of ``capability``."""
    from engine.backends.paged.attention import AttentionMetadata
    from engine.backends.paged.capability import fp8_capable, triton_serves
    from engine.backends.paged.kernels import TritonOps, rms_norm, rotary, silu_and_mul
    from engine.backends.paged.kernels.launch import recording
    from engine.backends.paged.kernels.sampling import race

    meta_dev = torch.device("meta")
    # the FP8 KV cache is refused at load before sm_89 (capability.check_cuda_config), so never launched there
    kv_choices = [None, torch.float8_e4m3fn] if fp8_capable(capability) else [None]

    def t(*shape, dtype=torch.int32):
        return torch.empty(*shape, dtype=dtype, device=meta_dev)

    with recording() as launches:
        race(t(256, 151936, dtype=torch.float32), t(256, 3, dtype=torch.int64))  # the sampler's draw
        for dtype in DTYPES:
            for kv in kv_choices:
                for _name, heads, n_kv, dim, hidden, inter in SHAPES:
                    if triton_serves(str(dtype).removeprefix("torch."), dim) is not None:
                        continue  # runs on the torch ops
                    for bs in BLOCK_SIZES:
                        k_cache = t(64, bs, n_kv, dim, dtype=kv or dtype)
                        v_cache = t(64, bs, n_kv, dim, dtype=kv or dtype)
                        for n_dec, chunks in ((1, ()), (256, ()), (3, (7,)), (0, (300, 40))):
                            n_tok = n_dec + sum(chunks)
                            meta = AttentionMetadata(slot_mapping=t(n_tok, dtype=torch.int64), num_decodes=n_dec)
                            if n_dec:
                                meta.decode_block_tables = t(n_dec, 32)
                                meta.decode_context_lens = t(n_dec)
                            if chunks:
                                meta.prefill_query_lens = chunks
                                meta.prefill_query_starts = tuple(n_dec + sum(chunks[:i]) for i in range(len(chunks)))
                                meta.prefill_context_lens = chunks
                                meta.prefill_block_tables = t(len(chunks), 32)
                                meta.prefill_cu_query_lens = t(len(chunks) + 1)
                                meta.prefill_context_lens_t = t(len(chunks))
                            q = t(n_tok, heads, dim, dtype=dtype)
                            k = t(n_tok, n_kv, dim, dtype=dtype)
                            TritonOps.attention(q, k, k, k_cache, v_cache, meta, dim**-0.5)
                    x = t(5, hidden, dtype=dtype)
                    rms_norm(x, t(hidden, dtype=dtype), 1e-6)
                    rms_norm(x, t(hidden, dtype=dtype), 1e-6, x)
                    silu_and_mul(t(5, 2 * inter, dtype=dtype))
                    qkv = t(5, (heads + 2 * n_kv) * dim, dtype=dtype)
                    q5 = qkv[:, : heads * dim].view(5, heads, dim)
                    k5 = qkv[:, heads * dim : (heads + n_kv) * dim].view(5, n_kv, dim)
                    rotary(t(5), q5, k5, t(64, dim, dtype=torch.float32))
                    w = t(dim, dtype=dtype)
                    rotary(t(5), q5, k5, t(64, dim, dtype=torch.float32), w, w, 1e-6)  # with Qwen3's q/k norms
    return list(dict.fromkeys(_variant(x) for x in launches))


def _compile(job: tuple[Variant, str]) -> tuple[Variant, str, str | None, float]:
    """Compile one variant for one architecture: (variant, arch, error or None, seconds)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compile as triton_compile

    variant, arch = job
    t0 = time.perf_counter()
    fn = getattr(importlib.import_module(variant.module), variant.kernel)
    try:
        src = ASTSource(fn, dict(variant.signature), constexprs=dict(variant.constexprs))
        kernel = triton_compile(src, target=GPUTarget("cuda", int(arch.removeprefix("sm_")), 32))
        if not kernel.asm.get("cubin"):
            raise RuntimeError("no cubin produced")
        error = None
    except Exception as exc:  # Triton's compile errors come as many types; each is reported, none is fatal
        error = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
    return variant, arch, error, time.perf_counter() - t0


def _capability(arch: str) -> tuple[int, int]:
    number = int(arch.removeprefix("sm_"))
    return number // 10, number % 10


def run(archs: list[str], *, jobs: int | None = None, out=sys.stdout) -> int:
    """Compile every variant for every arch; prints a line each. Returns the number of failures."""
    work = [(v, arch) for arch in archs for v in engine_variants(_capability(arch))]
    jobs = jobs or min(len(work), os.cpu_count() or 1)
    failures = 0
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for variant, arch, error, seconds in pool.map(_compile, work, chunksize=1):
            status = "ok  " if error is None else "FAIL"
            print(f"{status} {arch} {variant.describe()} ({seconds:.1f} s)" + (f": {error}" if error else ""), file=out)
            failures += error is not None
    print(f"{len(work) - failures}/{len(work)} variants compiled for {', '.join(archs)} "
          f"in {time.perf_counter() - t0:.0f} s", file=out)  # fmt: skip
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compile the paged engine's Triton kernels for NVIDIA GPUs.")
    ap.add_argument("--arch", default="sm_80,sm_90", help="comma-separated: sm_80, sm_89, sm_90, ...")
    ap.add_argument("--jobs", type=int, default=None, help="compiler processes (default: one per core)")
    args = ap.parse_args(argv)
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    bad = [a for a in archs if not (a.startswith("sm_") and a[3:].isdigit() and int(a[3:]) >= 75)]
    if bad:
        ap.error(f"unknown architecture {bad[0]!r}; write them as sm_80,sm_90.")
    return 1 if run(archs, jobs=args.jobs) else 0


if __name__ == "__main__":
    sys.exit(main())
