"""SIGTERM ends the worker even while its decode thread is inside one long llama.cpp call."""

from __future__ import annotations

import signal
import subprocess
import threading

import httpx

from tests.engine.server.conftest import MODEL, Server


def test_sigterm_ends_a_worker_stuck_in_a_long_llama_cpp_call():
    # One text of nearly the whole context is embedded in a single llama_decode call: tens of seconds on
    # a small machine, and nothing can interrupt it. The worker must still be gone soon after SIGTERM.
    server = Server("--ctx", "4096", "--parallel", "1")
    try:
        text = "hello world " * 1900  # about 3,800 tokens of the starter's vocabulary
        entered = threading.Event()

        def embed() -> None:
            entered.set()
            try:
                httpx.post(f"{server.base_url}/embeddings", json={"model": MODEL, "input": text},
                           headers=server.headers, timeout=300)  # fmt: skip
            except httpx.HTTPError:
                pass  # the worker went away mid-request, as it should

        client = threading.Thread(target=embed, daemon=True)
        client.start()
        entered.wait(10)
        threading.Event().wait(1.5)  # the request reaches the decode thread, which enters the call
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError("the worker was still running 10 s after SIGTERM") from None
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
