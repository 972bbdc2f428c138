"""Peers to measure Hearth against, started on this machine: llama-cpp-python's server and llama.cpp's
own C++ ``llama-server``.

Used by the scripts in benchmarks/. The peer needs llama-cpp-python's ``server`` extra
(sse-starlette, starlette-context, pydantic-settings; all in Hearth's ``test`` extra).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from engine.bench.errors import BenchError


def eog_token_ids(model_path: Path) -> list[int]:
    """The end-of-generation tokens of a GGUF file (EOS, end-of-turn, ...), read from its vocabulary.

    A server that does not honour ``ignore_eos`` is kept generating by a logit bias against these.
    """
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    try:
        vocab = llm._model.vocab  # the public API has no is_eog; the vocabulary handle is stable since 0.3
        return [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    finally:
        llm.close()


def eos_ban(model_path: Path) -> dict[str, dict[str, float]]:
    """An OpenAI ``logit_bias`` body that bans every end-of-generation token of ``model_path``."""
    return {"logit_bias": {str(t): -100.0 for t in eog_token_ids(model_path)}}


class PeerServer:
    """A peer's server process on a free loopback port, started and stopped by us.

    Subclasses give ``name``, ``hint`` (said when it exits at start) and ``command(port)``.
    """

    name = "peer"
    hint = ""

    def __init__(self, *, log_path: Path | None = None) -> None:
        from engine.worker.supervisor import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.cmd = self.command(self.port)
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 120.0) -> PeerServer:
        """Start it and wait until it lists its model.

        Raises:
            BenchError: it exited (a missing extra, a bad file) or did not answer in time.
        """
        import httpx

        out = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                self.cmd, stdout=out if out is not None else subprocess.DEVNULL, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            if out is not None:
                out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                where = f"; see {self.log_path}" if self.log_path else ""
                raise BenchError(f"{self.name} exited with code {self.proc.returncode}{where}{self.hint}.")
            try:
                if httpx.get(f"{self.url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise BenchError(f"{self.name} did not answer within {timeout:g} s.")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> PeerServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class LlamaCppPythonServer(PeerServer):
    """``python -m llama_cpp.server`` (one request at a time).

    Args:
        model_path: The GGUF file.
        n_ctx: Context length (the server runs one request at a time, so this is per request).
        n_threads: Threads for decoding and for prompts alike.
        log_path: Where its output goes.
        extra_args: More server flags.
    """

    name = "python -m llama_cpp.server"
    hint = " (it needs: pip install 'llama-cpp-python[server]')"

    def __init__(
        self,
        model_path: Path,
        *,
        n_ctx: int,
        n_threads: int,
        log_path: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.args = (model_path, n_ctx, n_threads, extra_args)
        super().__init__(log_path=log_path)

    def command(self, port: int) -> list[str]:
        model_path, n_ctx, n_threads, extra_args = self.args
        return [
            sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
            "--n_threads_batch", str(n_threads),
            # Its default cuts off a running stream when the next request arrives.
            "--interrupt_requests", "False",
            # Its default keeps the logits of every prompt token, which only logprobs of the prompt need.
            "--logits_all", "False", "--verbose", "False", *extra_args,
        ]  # fmt: skip


class LlamaServer(PeerServer):
    """llama.cpp's own C++ ``llama-server``, built for measurement only (see benchmarks/peers.md).

    Args:
        binary: The ``llama-server`` executable.
        model_path: The GGUF file.
        n_ctx: Context per sequence (the server is given ``n_ctx * parallel`` for its slots).
        parallel: Sequence slots (``-np``).
        n_threads: Threads for decoding and for prompts alike.
        log_path: Where its output goes.
        extra_args: More server flags.
    """

    name = "llama-server"

    def __init__(
        self,
        binary: Path,
        model_path: Path,
        *,
        n_ctx: int,
        parallel: int,
        n_threads: int,
        log_path: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.args = (binary, model_path, n_ctx, parallel, n_threads, extra_args)
        super().__init__(log_path=log_path)

    def command(self, port: int) -> list[str]:
        binary, model_path, n_ctx, parallel, n_threads, extra_args = self.args
        return [
            str(binary), "-m", str(model_path), "--host", "127.0.0.1", "--port", str(port),
            "-c", str(n_ctx * parallel), "-np", str(parallel), "-t", str(n_threads), "-tb", str(n_threads),
            "--jinja", "--no-webui", *extra_args,
        ]  # fmt: skip
