"""`hearth chat --backend paged` answers with the starter model through the paged engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def hearth(tmp_path, *args: str) -> subprocess.CompletedProcess:
    # CUDA hidden: the float32 and int4 paths are the CPU's, whatever GPU the machine has
    env = {**os.environ, "HEARTH_HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


@pytest.mark.parametrize("quant", [[], ["--quantization", "int4"]], ids=["float32", "int4"])
def test_hearth_chat_runs_on_the_paged_backend(tmp_path, quant):
    proc = hearth(tmp_path, "chat", "--backend", "paged", *quant, "-t", "0", "--max-tokens", "12", "--stats",
                  "What is the capital of France?")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Paris" in proc.stdout
    assert "tokens/s" in proc.stderr  # --stats came from the stream's final chunk


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_quantization_without_the_paged_backend_is_one_clear_line(tmp_path, command):
    proc = hearth(tmp_path, command, "--quantization", "int4", *(["hi"] if command == "chat" else ["--port", "0"]))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "hearth: --quantization applies to the paged engine; add --backend paged."
