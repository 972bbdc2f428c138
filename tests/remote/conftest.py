"""Real, independent OpenAI-compatible servers on loopback for the remote-provider tests:
llama-cpp-python's own server with the starter model, and a second `hearth serve` (with a data
folder of its own, so it has no providers and cannot forward anything back)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from engine.starter import STARTER_NAME
from engine.worker.net import free_port

LLAMA_KEY = "llama-test-key"
PROVIDER_KEY = "hearth-provider-key"
LOCAL_KEY = "local-test-key"
ALIAS = "HuggingFaceTB/SmolLM2-135M-Instruct"  # served names of vLLM and SGLang have a slash too
# The OS keyring is never touched by tests or the processes they start (tests/conftest.py sets the same).
NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


class LlamaCppServer:
    """``python -m llama_cpp.server`` with the starter model on a free loopback port."""

    def __init__(self, model: Path, *, api_key: str = LLAMA_KEY, n_ctx: int = 1024) -> None:
        self.port = free_port()
        self.api_key = api_key
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        cmd = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", ALIAS,
            "--host", "127.0.0.1", "--port", str(self.port), "--api_key", api_key,
            "--n_ctx", str(n_ctx), "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "False",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self.proc.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/models", headers=self.headers, timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("llama_cpp.server did not answer within 120 s")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def client(self):
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=60)

    def repeated_chat(self, **body):
        """The server's chat completion for ``body``, asked twice: the second answer, the one any request that
        repeats the prompt gets. llama_cpp.server keeps the last prompt and computes only its last token again
        when the same prompt comes next; on some CPUs (AVX2) a token computed alone sums differently in the last
        bits from one computed in a longer block, enough to flip a greedy near-tie. A request relayed to it right
        after finds the prompt cached the same way."""
        client = self.client()
        client.chat.completions.create(**body)
        return client.chat.completions.create(**body)

    def kill(self) -> None:
        """Die at once, as a crashed or unplugged server does (no goodbye to open streams)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def hearth_serve(home: Path, api_key: str, *, log: Path):
    """A real `hearth serve` with the starter model loaded, its data folder at ``home``."""
    from engine.worker.supervisor import WorkerSupervisor

    sup = WorkerSupervisor(
        port=0,
        model=STARTER_NAME,
        api_key=api_key,
        extra_args=["--backend", "llamacpp", "--parallel", "4", "--ctx", "1024", "--threads", "1"],
        env={"HEARTH_HOME": str(home), **NO_KEYRING},
        log_path=log,
        startup_timeout=180,
    )
    sup.start()
    return sup


def openai_client(base_url: str, api_key: str):
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)


@contextmanager
def data_folder(home: Path):
    """Run in-process CLI commands against ``home`` (the local worker's data folder)."""
    old = os.environ.get("HEARTH_HOME")
    os.environ["HEARTH_HOME"] = str(home)
    try:
        yield home
    finally:
        if old is None:
            os.environ.pop("HEARTH_HOME", None)
        else:
            os.environ["HEARTH_HOME"] = old


class SilentServer:
    """A listening socket that accepts connections and never answers: a hung server."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="session")
def llama_server(starter_path):
    server = LlamaCppServer(starter_path)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def provider_hearth(tmp_path_factory):
    """A second Hearth, as a provider: its own data folder, so it knows no providers of its own."""
    home = tmp_path_factory.mktemp("provider-home")
    sup = hearth_serve(home, PROVIDER_KEY, log=home / "worker.log")
    yield sup
    sup.stop()
