"""llama.cpp's own ``llama-server``, the peer some tests compare Hearth's answers with, where one is built
(it is not built by ``make test``: benchmarks/peers.md says how)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from engine.worker.supervisor import free_port

LLAMA_SERVER = os.environ.get("HEARTH_LLAMA_SERVER") or shutil.which("llama-server")

needs_llama_server = pytest.mark.skipif(
    not LLAMA_SERVER,
    reason="no llama-server: build it from the sdist's llama.cpp as benchmarks/peers.md says "
    "(cmake --build build --target llama-server) and put it on PATH or in HEARTH_LLAMA_SERVER",
)


@contextmanager
def llama_server(model: Path, *args: str) -> Iterator[str]:
    """``llama-server -m model *args`` on a free loopback port, stopped on leaving; yields its base URL."""
    assert LLAMA_SERVER is not None
    port = free_port()
    cmd = [LLAMA_SERVER, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", "1", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}: {' '.join(cmd)}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server did not become healthy in 60 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
