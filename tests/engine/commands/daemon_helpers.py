"""A real `hearth daemon` in a data folder of its own, driven as a user drives it: `hearth` subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.worker.supervisor import free_port

MODEL = "smollm2-135m-instruct"
# One decode thread and few slots: quick to load on a small shared machine.
WORKER_FLAGS = ("--parallel", "2", "--ctx", "1024", "--threads", "1")


def hearth(*args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """``hearth ARGS`` with ``home`` as its data folder."""
    full_env = {**os.environ, "HEARTH_HOME": str(home), **(env or {})}
    for name in ("HEARTH_URL", "HEARTH_API_KEY", "HEARTH_ADMIN_KEY"):
        if env is None or name not in env:
            full_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )


def hearth_json(*args: str, home: Path, env: dict[str, str] | None = None, expect: int = 0):
    out = hearth(*args, "--json", home=home, env=env)
    assert out.returncode == expect, out.stderr
    return json.loads(out.stdout)


def daemon_up(home: Path) -> dict:
    """Start a daemon on a free port in ``home``; its `hearth daemon up --json` answer."""
    info = hearth_json("daemon", "up", "--port", str(free_port()), *WORKER_FLAGS, home=home)
    assert info["running"] and info["started"], info
    return info


def daemon_down(home: Path) -> dict:
    return hearth_json("daemon", "down", home=home)
