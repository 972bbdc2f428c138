"""`hearth chat --backend paged` answers with the starter model through the paged engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_hearth_chat_runs_on_the_paged_backend(tmp_path):
    env = {**os.environ, "HEARTH_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "chat", "--backend", "paged", "-t", "0", "--max-tokens", "12", "--stats",
         "What is the capital of France?"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Paris" in proc.stdout
    assert "tokens/s" in proc.stderr  # --stats came from the stream's final chunk
