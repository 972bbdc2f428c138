"""MCP servers for the agent tests: the recorder (tests/engine/agent/mcp_server.py) over stdio and over
streamable HTTP on a free loopback port, each writing its calls to a log the test reads."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.agent import McpServerConfig
from engine.worker.supervisor import free_port

SERVER = Path(__file__).with_name("mcp_server.py")


class CallLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def calls(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def stdio_config(name: str, log: Path, **env: str) -> McpServerConfig:
    return McpServerConfig(
        name=name, command=sys.executable, args=(str(SERVER), "stdio"),
        env=(("HEARTH_TEST_MCP_LOG", str(log)), *env.items()),
    )  # fmt: skip


@pytest.fixture
def call_log(tmp_path: Path) -> CallLog:
    return CallLog(tmp_path / "calls.jsonl")


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    """The recorder over streamable HTTP: (url, CallLog)."""
    log = tmp_path_factory.mktemp("http-mcp") / "calls.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env={**__import__("os").environ, "HEARTH_TEST_MCP_LOG": str(log)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the MCP server exited: {proc.stderr.read()}")
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        yield url, CallLog(log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def api():
    """A real `hearth serve` with the starter model (the agent loop is its OpenAI client)."""
    from tests.engine.server.conftest import Server

    s = Server("--parallel", "2", "--ctx", "2048")
    yield s
    s.stop()
