"""Every Triton kernel against the plain-torch reference, run on the CPU by Triton's interpreter.

The interpreter is switched on by TRITON_INTERPRET=1 before triton is imported, so the checks run
in a child process: the variable never leaks into the rest of the test session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ("store_kv", "decode", "prefill", "rms_norm", "silu_and_mul", "rotary", "model forward", "race")


@pytest.fixture(scope="module")
def results() -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "engine.backends.paged.kernels.checks", "cpu"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_matches_reference_under_the_interpreter(results, kernel):
    mine = [r for r in results if r["name"].startswith(kernel)]
    assert len(mine) >= 1
    bad = [r for r in mine if not r["error"] <= r["tolerance"]]
    assert not bad, bad


def test_fp8_kv_cache_decodes_like_the_reference(results):
    mine = [r for r in results if "float8" in r["name"]]
    assert mine and all(r["error"] <= r["tolerance"] for r in mine)


def test_the_interpreter_did_not_leak_into_this_process():
    assert os.environ.get("TRITON_INTERPRET") != "1"
