"""`hearth` as a user runs it: a subprocess, real model, real exit codes."""

from __future__ import annotations

import subprocess
import sys


def hearth(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_chat_one_shot_prints_an_answer_and_exits_zero():
    out = hearth("chat", "--local", "--temperature", "0", "--max-tokens", "24", "Name three colours.")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip()) > 5
    assert "Traceback" not in out.stderr


def test_missing_model_is_one_line_naming_it_and_non_zero():
    out = hearth("chat", "--model", "no-such-model", "hi")
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "no-such-model" in lines[0]


def test_version_and_models():
    out = hearth("--version")
    assert out.returncode == 0 and out.stdout.startswith("hearth ")
    out = hearth("models")
    assert out.returncode == 0
    assert "smollm2-135m-instruct" in out.stdout


def test_a_broken_model_file_is_one_line_not_a_traceback(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 100)
    out = hearth("chat", "--model", str(bad), "hi")
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert str(bad) in out.stderr
