"""benchmarks/gpu_check.py at tiny sizes on the CPU: the GPU script is known to run before a GPU is at hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[3]


def test_gpu_check_dry_run_passes_and_reports_every_figure():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry-run"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=500)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("summary "))
    summary = json.loads(line.removeprefix("summary "))
    assert summary["kernel_checks"]["failed"] == [] and summary["kernel_checks"]["total"] >= 20
    for key in ("engine_tokens_per_s", "decode_step_ms_batch_1", "decode_step_ms_batch_8", "hf_tokens_per_s",
                "ratio_slice", "ratio_full_vs_hf"):  # fmt: skip
        assert summary[key] > 0, key
