"""The paged engine in a process of its own: the model, scheduler, sampler, grammar matchers and drafters,
stepping with nothing else on its interpreter (vLLM V1's EngineCore; SGLang's scheduler process).

The API process (:mod:`engine.backends.paged.engine_process`) renders, tokenizes, detokenizes, matches stop
strings and parses tool calls; this process only schedules and samples. Each step sends one message with
every request's new tokens. Messages are pickled tuples over a pipe:

API -> engine:
    ``("add", request_id, prompt, request, rendered, drafter)``; ``("cancel", [request_id, ...])`` (ended as
    ``cancelled``); ``("free", [request_id, ...])`` (the API ended them itself, a stop string: freed
    silently); ``("stats", token)``; ``("stop",)``.
engine -> API:
    ``("ready", facts)`` or ``("failed", exception)`` once, after loading; then
    ``("step", tokens, ended, stats)`` with ``tokens`` a list of ``(request_id, token, logprobs, num_tokens,
    drafted, kept_draft, cached_tokens, last)`` (``last``: this process ended the request with it),
    ``ended`` a list of ``(request_id, reason, error, code)`` and ``stats`` the engine's figures (BackendStats) at
    most every ``STATS_EVERY`` seconds and when it runs out of work, else None; ``("stats", token,
    BackendStats)``.
"""

from __future__ import annotations

import logging
import pickle
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from engine.backends.speculative import DraftSource
from engine.tools.guidance import grammar_failure
from engine.types import GenerationRequest, SamplingParams

log = logging.getLogger(__name__)

#: Seconds between the engine's figures sent with its steps: the API process answers /api/stats (and every
#: request's check of the slots) from the latest, without waiting for a step to end.
STATS_EVERY = 0.25


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """What the API process needs to know of the loaded engine."""

    n_ctx: int
    n_ctx_train: int
    vocab_size: int
    model_type: str
    num_parameters: int
    device: str
    dtype: str
    max_num_seqs: int
    max_waiting: int
    load_plan: dict[str, Any] | None


class CoreRequest:
    """A sequence's owner in the engine process: its sampler and drafter, and what ends it here (the end of
    generation, ``max_tokens``, a full context); stop strings are the API process's."""

    __slots__ = ("request_id", "sampler", "drafter", "params", "end_ids", "generated")

    def __init__(self, request_id: str, sampler: Any, drafter: DraftSource | None, params: SamplingParams) -> None:
        self.request_id = request_id
        self.sampler = sampler
        self.drafter = drafter
        self.params = params
        self.end_ids = sampler.end_ids
        self.generated = 0

    def push(self, token: int, num_tokens: int, n_ctx: int) -> bool:
        """Whether ``token`` ends the request (the same decision as RequestStream.push, less stop strings)."""
        if token in self.end_ids:
            return True
        self.generated += 1
        if self.drafter is not None:
            self.drafter.push(token)
        max_tokens = self.params.max_tokens
        return (max_tokens is not None and self.generated >= max_tokens) or num_tokens >= n_ctx


def serve_engine(conn: Connection) -> None:
    """The engine process's body: load what the first message names, report, then step until told to stop or
    the API process is gone."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s engine: %(message)s")
    from pathlib import Path

    from engine.backends.paged.startup import start_engine
    from engine.collector import freeze_loaded_objects

    path, options = conn.recv()
    try:
        loaded = start_engine(Path(path), options)
    except BaseException as exc:  # noqa: BLE001 - handed to the API process, which raises it
        try:
            conn.send(("failed", exc))
        except Exception:  # an exception that does not pickle: its sentence
            conn.send(("failed", RuntimeError(str(exc))))
        return
    freeze_loaded_objects()  # this process serves this engine only, from here on
    engine = loaded.engine
    args = engine.runner.model.args
    plan = loaded.plan
    conn.send((
        "ready",
        EngineFacts(
            n_ctx=loaded.config.max_model_len, n_ctx_train=args.max_position_embeddings, vocab_size=args.vocab_size,
            model_type=args.model_type, num_parameters=loaded.num_parameters, device=str(loaded.device),
            dtype=str(loaded.dtype).removeprefix("torch."), max_num_seqs=loaded.config.max_num_seqs,
            max_waiting=loaded.config.max_waiting, load_plan=plan.to_dict() if plan is not None else None,
        ),
    ))  # fmt: skip
    EngineCore(loaded, conn).run()


class EngineCore:
    """Steps the engine, taking requests from the pipe and sending each step's tokens back.

    A thread reads the pipe and another writes it, so the loop neither waits for a message nor for the API
    process to read one.
    """

    def __init__(self, loaded: Any, conn: Connection) -> None:
        self.loaded = loaded
        self.engine = loaded.engine
        self.conn = conn
        self.n_ctx = loaded.config.max_model_len
        self.inbox: deque[tuple] = deque()
        self.wake = threading.Event()
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.by_id: dict[str, Any] = {}  # request id -> Sequence
        self.ended: list[tuple[str, str, str | None, str | None]] = []
        self.stopping = False
        self.stats_at = 0.0  # when the engine's figures were last sent

    def run(self) -> None:
        threading.Thread(target=self._receive, name="engine-in", daemon=True).start()
        sender = threading.Thread(target=self._send_all, name="engine-out", daemon=True)
        sender.start()
        try:
            self._loop()
        finally:
            self.outbox.put(None)
            sender.join(timeout=10)

    def _receive(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):  # the API process is gone: nothing is left to serve
                msg = ("stop",)
            self.inbox.append(msg)
            self.wake.set()
            if msg[0] == "stop":
                return

    def _send_all(self) -> None:
        while (data := self.outbox.get()) is not None:
            try:
                self.conn.send_bytes(data)
            except OSError:
                return

    def _send(self, msg: tuple) -> None:
        self.outbox.put(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def _loop(self) -> None:
        engine = self.engine
        while True:
            if not engine.has_work and not self.inbox:
                self.wake.wait()
            self.wake.clear()
            while self.inbox:
                self._handle(self.inbox.popleft())
            if self.stopping:
                for rid in list(self.by_id):
                    self._end(rid, "cancelled")
                self._flush([])
                return
            tokens: list[tuple] = []
            if engine.has_work:
                try:
                    outputs = engine.step()
                except Exception as exc:  # one bad step must not kill the loop: fail the requests in it
                    log.exception("engine step failed")
                    for rid in list(self.by_id):
                        self._end(rid, "error", f"Generation failed: {exc}.")
                else:
                    tokens = self._record(outputs)
            self._flush(tokens)

    def _record(self, outputs: Iterable[tuple]) -> list[tuple]:
        """Each token of a step (the engine's ``StepOutputs``) as the API process reads it; frees the requests it ends."""
        tokens = []
        n_ctx = self.n_ctx
        for seq, token, logprobs, num_tokens, drafted, kept_draft in outputs:
            if seq.is_finished:  # a token verified after the one that ended the request
                continue
            owner = seq.owner
            if owner.sampler.matcher is not None and (failed := grammar_failure(owner.sampler)) is not None:
                self._end(owner.request_id, "error", str(failed), failed.code)
                continue
            last = owner.push(token, num_tokens, n_ctx)
            tokens.append((owner.request_id, token, logprobs, num_tokens, drafted, kept_draft, seq.num_cached_tokens, last))
            if last:
                self._free(owner.request_id)
        return tokens

    def _flush(self, tokens: list[tuple]) -> None:
        now = time.monotonic()
        due = now - self.stats_at >= STATS_EVERY  # a long prompt's steps give no tokens: its figures still go
        if tokens or self.ended or due:
            ended, self.ended = self.ended, []
            stats = None
            if due or not self.engine.has_work:
                stats, self.stats_at = self.engine.stats(waiting=0), now
            self._send(("step", tokens, ended, stats))

    def _free(self, rid: str) -> Any:
        seq = self.by_id.pop(rid, None)
        if seq is not None:
            self.engine.finish(seq)
            if seq.owner.drafter is not None:
                seq.owner.drafter.close()
        return seq

    def _end(self, rid: str, reason: str, error: str | None = None, code: str | None = None) -> None:
        if self._free(rid) is not None:
            self.ended.append((rid, reason, error, code))

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "add":
            self._add(*msg[1:])
        elif kind == "cancel":
            for rid in msg[1]:
                self._end(rid, "cancelled")
        elif kind == "free":
            for rid in msg[1]:
                self._free(rid)
        elif kind == "stats":
            self._send(("stats", msg[1], self.engine.stats(waiting=0)))
        elif kind == "stop":
            self.stopping = True

    def _add(self, rid: str, prompt: list[int], request: GenerationRequest, rendered: Any, drafter: Any) -> None:
        from engine.backends.paged.sampler import RequestSampler, thinking_for
        from engine.backends.paged.sequence import Sequence
        from engine.tools.guidance import matcher_for

        le = self.loaded
        tok = le.checkpoint.tokenizer
        n_logits = le.engine.runner.model.args.vocab_size
        try:
            sampler = RequestSampler(request.params, vocab_size=n_logits, eos_ids=sorted(tok.eog_ids), device=le.device,
                                     matcher=matcher_for(rendered, request, tok, n_logits),
                                     thinking=thinking_for(rendered, request.params, tok))  # fmt: skip
        except Exception as exc:  # the API process checked what it could; a grammar that fails to build
            self.ended.append((rid, "error", str(exc), None))
            return
        owner = CoreRequest(rid, sampler, drafter, request.params)
        seq = Sequence(prompt, request.params, block_size=le.config.block_size, request_id=rid, owner=owner)
        self.by_id[rid] = seq
        self.engine.add(seq)


__all__ = ["CoreRequest", "EngineCore", "EngineFacts", "serve_engine"]


if __name__ == "__main__":  # python -m engine.backends.paged.engine_core FD (what EngineProcess starts)
    import sys

    from engine.backends.paged import (
        engine_core,  # its classes pickled by their module's name, not __main__'s
    )

    engine_core.serve_engine(Connection(int(sys.argv[1])))
