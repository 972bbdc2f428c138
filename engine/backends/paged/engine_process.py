"""The API process's side of the paged engine's process (:mod:`engine.backends.paged.engine_core`): admission,
cancellation and statistics across the pipe, and the output processor that turns each step's tokens into
every request's chunks in one pass (detokenizing, stop strings, logprobs' texts), waking each event loop
once per step.

An engine process that dies ends its requests with an error chunk that says so, and is started again.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

from engine.backends.admission import AdmissionQueue
from engine.backends.base import BackendStats, LoadOptions
from engine.backends.delivery import delivery_batch
from engine.backends.paged.engine_core import EngineFacts
from engine.backends.runtime import RequestStream
from engine.errors import ModelLoadError, Overloaded
from engine.gguf.vocab import Vocabulary
from engine.types import TokenLogprob

log = logging.getLogger(__name__)

#: Seconds /api/stats waits for the engine's figures (a step in progress delays them).
STATS_TIMEOUT = 5.0


class PendingRequest:
    """A request the engine process serves, as the API process keeps it: its stream, and the flag cancellation sets."""

    __slots__ = ("request_id", "stream", "cancelled")

    def __init__(self, stream: RequestStream) -> None:
        self.request_id = stream.request_id
        self.stream = stream
        self.cancelled = False


class EngineProcess(AdmissionQueue[PendingRequest]):
    """The paged engine of one model, in a child process.

    Args:
        path: The model's folder or GGUF file.
        options: How to load it.
        tokenizer: The model's vocabulary (token pieces for logprobs' texts).
        name: The process's name.

    Raises:
        ModelLoadError, InvalidRequest, BackendUnavailable: (from the constructor) the engine could not load.
    """

    def __init__(self, path: Path, options: LoadOptions, tokenizer: Vocabulary, *, name: str) -> None:
        super().__init__(max_waiting=1)
        self.path = path
        self.options = options
        self.tokenizer = tokenizer
        self.name = name
        self.stats_requests = 0
        self.stats_prompt_tokens = 0
        self.generated_tokens = 0
        self.restarts = 0
        self._tokens = itertools.count()
        self._stats: dict[int, Future[BackendStats]] = {}
        self._latest: BackendStats | None = None  # the engine's figures sent with its latest steps
        self._send_lock = threading.Lock()
        self._restarting = False
        self.facts, self._proc, self._conn = self._spawn()
        self.max_waiting = self.facts.max_waiting
        self.max_running = self.facts.max_num_seqs
        self.n_ctx = self.facts.n_ctx
        self._reader = threading.Thread(target=self._read, name=f"{name}-out", daemon=True)
        self._reader.start()

    # -- the process ----------------------------------------------------------------------------
    def _spawn(self) -> tuple[EngineFacts, subprocess.Popen, Connection]:
        # A fresh interpreter running the engine's module, not multiprocessing's spawn: that one runs the
        # parent's main script again in the child, which a script without a main guard cannot take.
        ours, theirs = socket.socketpair()
        cmd = [sys.executable, "-m", "engine.backends.paged.engine_core", str(theirs.fileno())]
        # OpenMP threads that sleep at a barrier instead of spinning: on a machine whose cores other processes
        # keep busy, a spinning team waits for its descheduled member at every op (a decode step of the tiny
        # CPU model took ~1 s instead of ~70 ms on a loaded 2-core VM); a GPU's step hardly uses them.
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
        proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        theirs.close()
        conn = Connection(ours.detach())
        conn.send((str(self.path), self.options))
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            code = proc.wait(timeout=30)
            conn.close()
            raise ModelLoadError(str(self.path), f"the engine process ended while loading (exit code {code}).") from None
        if msg[0] == "failed":
            proc.wait(timeout=30)
            conn.close()
            raise msg[1]
        return msg[1], proc, conn

    def _send(self, msg: tuple) -> None:
        self._send_data(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def _send_data(self, data: bytes) -> None:
        with self._send_lock:
            try:
                self._conn.send_bytes(data)
            except OSError:  # the process is gone; the reader reports it
                pass

    # -- called from request threads ------------------------------------------------------------
    def add(self, pending: PendingRequest, prompt: list[int], rendered, drafter) -> None:
        """Hand ``pending``'s request to the engine.

        Raises:
            Overloaded: too many requests are already waiting, the model is being unloaded, or its engine is
                starting again.
        """
        # pickled before the lock: a long prompt's bytes are made while other requests come and go
        data = pickle.dumps(("add", pending.request_id, prompt, pending.stream.request, rendered, drafter),
                            protocol=pickle.HIGHEST_PROTOCOL)  # fmt: skip
        with self._cond:
            if self._restarting:
                raise Overloaded("The model's engine is starting again after a failure; retry in a moment.", retry_after=5.0)
            self._accept(pending)
            self.stats_requests += 1
            self.stats_prompt_tokens += len(prompt)
            self._send_data(data)  # under the lock: a cancel of this request is sent after it

    def cancel(self, request_id: str) -> None:
        with self._cond:
            pending = self._by_id.get(request_id)
            if pending is None or pending.cancelled:
                return
            pending.cancelled = True
            self._send(("cancel", [request_id]))

    def cancel_all(self) -> None:
        with self._cond:
            ids = [p.request_id for p in self._by_id.values() if not p.cancelled]
            for p in self._by_id.values():
                p.cancelled = True
            if ids:
                self._send(("cancel", ids))

    def stats(self) -> BackendStats:
        """The engine's figures: those its steps sent last (at most ``STATS_EVERY`` seconds old while it works,
        its final ones once it ran out of work), asked of it only before its first step; never waiting for a
        step to end."""
        out = self._latest
        if out is None:
            token = next(self._tokens)
            future: Future[BackendStats] = Future()
            self._stats[token] = future
            self._send(("stats", token))
            try:
                out = future.result(timeout=STATS_TIMEOUT)
            except (FutureTimeout, CancelledError):  # the engine is busy or gone: what this side knows
                self._stats.pop(token, None)
        with self._cond:
            counts = dict(requests=self.stats_requests, prompt_tokens=self.stats_prompt_tokens,
                          generated_tokens=self.generated_tokens)  # fmt: skip
            in_flight = len(self._by_id)
        # running and waiting as admission counts them (the engine's own figures lag by up to a step)
        running = min(in_flight, self.max_running)
        if out is None:
            out = BackendStats(running=running, waiting=in_flight - running, slots=self.max_running, n_ctx_per_sequence=self.n_ctx)
        out = replace(out, running=running, waiting=in_flight - running, max_waiting=self.max_waiting,
                      details=dict(out.details), **counts)  # fmt: skip
        out.details.update(device=self.facts.device, load_plan=self.facts.load_plan, engine_process=self._proc.pid,
                           engine_restarts=self.restarts)  # fmt: skip
        return out

    def close(self) -> None:
        """Cancel every request, stop the process and wait for it to end."""
        with self._cond:
            self._stopping = True
        self._send(("stop",))
        self._reader.join(timeout=60)
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)
        self._conn.close()

    # -- the output processor -------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                msg = pickle.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                if self._stopping or not self._restart():
                    return
                continue
            kind = msg[0]
            if kind == "step":
                self._step(msg[1], msg[2])
                if msg[3] is not None:
                    self._latest = msg[3]
            elif kind == "stats":
                future = self._stats.pop(msg[1], None)
                if future is not None:
                    future.set_result(msg[2])

    def _logprob(self, token: int, data: tuple[float, list[int], list[float]]) -> TokenLogprob:
        return TokenLogprob.of(self.tokenizer.piece, token, *data)

    def _step(self, tokens: list[tuple], ended: list[tuple[str, str, str | None, str | None]]) -> None:
        """One step's tokens for every request, and the requests the engine ended: each stream's chunks, then
        one wake-up of each reader's event loop."""
        by_id = self._by_id
        n_ctx = self.n_ctx
        done: list[str] = []
        freed: list[str] = []
        generated = 0
        with delivery_batch():
            for rid, token, lp, num_tokens, drafted, kept, cached, last in tokens:
                pending = by_id.get(rid)
                if pending is None:
                    continue
                stream = pending.stream
                if stream.finished:
                    continue
                stream.cached_tokens = cached
                if drafted:
                    stream.verifying(drafted)
                n_before = len(stream.generated)
                logprobs = (self._logprob(token, lp),) if lp is not None else ()
                over = stream.push(token, logprobs=logprobs, context_full=num_tokens >= n_ctx, kept_draft=kept)
                generated += len(stream.generated) - n_before
                if over:
                    done.append(rid)
                    if not last:  # ended here (a stop string): the engine still holds it
                        freed.append(rid)
            for rid, reason, error, code in ended:
                pending = by_id.get(rid)
                if pending is not None:
                    pending.stream.finish(reason, error=error, code=code)  # type: ignore[arg-type]
                    done.append(rid)
        with self._cond:
            self.generated_tokens += generated
            for rid in done:
                by_id.pop(rid, None)
        if freed:
            self._send(("free", freed))

    def _restart(self) -> bool:
        """The engine process died: end its requests with an error and start it again. Returns whether it runs."""
        try:
            code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # its pipe broke but it lives on: it serves no one
            self._proc.kill()
            code = self._proc.wait(timeout=5)
        why = f"The model's engine process ended unexpectedly (exit code {code}); Hearth is starting it again. Retry the request."
        log.error("the paged engine's process for %s ended (exit code %s); starting it again", self.path.name, code)
        with self._cond:
            self._restarting = True
            self._latest = None
            pending = list(self._by_id.values())
            self._by_id.clear()
        with delivery_batch():
            for p in pending:
                p.stream.finish("error", error=why)
        for future in list(self._stats.values()):
            future.cancel()
        self._stats.clear()
        self._conn.close()
        try:
            self.facts, self._proc, self._conn = self._spawn()
        except Exception:
            log.exception("the paged engine for %s could not be started again", self.path.name)
            with self._cond:
                self._stopping = True
                self._restarting = False
            return False
        self.restarts += 1
        with self._cond:
            self._restarting = False
        return True


__all__ = ["EngineProcess", "PendingRequest"]
