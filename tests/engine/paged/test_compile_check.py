"""The Triton kernels compile for NVIDIA GPUs (sm_80, sm_90) on this machine, which has none.

``compile_check`` records every launch the engine's configurations make and compiles each variant
to a cubin with the ptxas that ships in the triton wheel; Triton refuses here what the GPU would.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from engine.backends.paged.kernels import compile_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ("_store_kernel", "_decode_split_kernel", "_decode_merge_kernel", "_prefill_kernel", "_rms_norm_kernel",
           "_silu_mul_kernel", "_rotary_kernel", "_race_kernel")  # fmt: skip


def test_every_engine_kernel_variant_compiles_for_sm80_and_sm90():
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-m", "engine.backends.paged.kernels.compile_check", "--arch", "sm_80,sm_90"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=900,
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, "\n".join(line for line in lines if line.startswith("FAIL"))[-4000:] + proc.stderr[-2000:]
    variants = [line for line in lines if line.startswith("ok ")]
    expected = len(compile_check.engine_variants((8, 0))) + len(compile_check.engine_variants((9, 0)))
    assert len(variants) == expected and re.match(rf"{expected}/{expected} variants compiled", lines[-1])
    for arch in ("sm_80", "sm_90"):
        for kernel in KERNELS:
            assert any(f" {arch} {kernel} " in line for line in variants), (arch, kernel)
    # every dtype the kernels serve, and the FP8 KV cache where the GPU has FP8 (sm_89 on)
    for dtype in ("bf16", "fp16"):
        assert any(f"[{dtype}" in line for line in variants), dtype
    assert any("sm_90 _decode_split_kernel" in line and "fp8e4nv" in line for line in variants)
    assert not any("sm_80" in line and "fp8e4nv" in line for line in variants)


@triton.jit
def _dot_over_k8(a_ptr, b_ptr, out_ptr, K: tl.constexpr):
    m = tl.arange(0, 16)
    k = tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * 16 + m[None, :])
    tl.store(out_ptr + m[:, None] * 16 + m[None, :], tl.dot(a, b))


def test_the_check_fails_a_16_bit_dot_over_8_keys_as_the_gpu_would():
    """The old prefill kernel's fault (a tl.dot over a key block of 8), which the interpreter accepts."""
    sig = (("a_ptr", "*bf16"), ("b_ptr", "*bf16"), ("out_ptr", "*fp32"), ("K", "constexpr"))
    bad = compile_check.Variant(__name__, "_dot_over_k8", sig, (("K", 8),))
    good = compile_check.Variant(__name__, "_dot_over_k8", sig, (("K", 16),))
    _, _, error, _ = compile_check._compile((bad, "sm_90"))
    assert error is not None and "16" in error
    assert compile_check._compile((good, "sm_90"))[2] is None


def test_a_launch_is_recorded_with_its_grid_and_constexprs_not_run():
    """Decode attention: one program per (sequence, KV head, context slice), not per query head."""
    import torch

    from engine.backends.paged.kernels import paged_decode_attention
    from engine.backends.paged.kernels.launch import recording

    meta = torch.device("meta")
    q = torch.empty(4, 16, 128, dtype=torch.bfloat16, device=meta)
    cache = torch.empty(64, 16, 8, 128, dtype=torch.bfloat16, device=meta)
    tables, lens = (torch.empty(4, 8, dtype=torch.int32, device=meta), torch.empty(4, dtype=torch.int32, device=meta))
    with recording() as launches:
        paged_decode_attention(q, cache, cache, tables, lens, 0.1, num_splits=4)
    split, merge = launches
    assert split.kernel.fn.__name__ == "_decode_split_kernel" and split.grid == (4, 8, 4)
    assert dict(split.constexprs)["BLOCK_D"] == 128 and merge.grid == (4, 16)


def test_context_slices_depend_on_the_batch_only_and_fill_the_gpu():
    """Batch 1 splits each context 16 ways; batch 256 reads each KV head in one program: no split to merge."""
    import torch

    from engine.backends.paged.kernels.attention import MAX_SPLITS, decode_splits

    cpu = torch.device("cpu")
    assert decode_splits(1, 8, 2, cpu) == MAX_SPLITS == 16
    assert decode_splits(256, 8, 2, cpu) == 1
    assert decode_splits(8, 8, 2, cpu) == 8  # 64 programs: 8 slices are the first to reach the 264 wanted
