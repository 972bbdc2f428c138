"""One thread that owns the MLX model: it loads it, runs one generation at a time, and frees it.

MLX evaluates lazily and keeps per-thread state, so every MLX call for a model happens on
its own thread; request threads only tokenize and read their queues. Requests wait first
come, first served. The KV cache of the last request stays, so a follow-up whose prompt
starts the same way (the next turn of a chat) computes only the new tokens.

A request that drafts (speculative decoding, engine.backends.speculative) has its pending token and
its draft computed in one call; each row is then sampled in order with the request's sampler, a drafted
token is kept while it is the token drawn before it, and the cache cells of those not kept are trimmed.
Drafts pay where a row costs well under a step; on MLX's Linux CPU build a row costs about a whole step,
which the measured row cost tells ``auto`` (it then drafts next to nothing).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from engine.backends.admission import AdmissionQueue
from engine.backends.base import BackendStats, common_prefix
from engine.backends.mlx.loader import LoadedModel
from engine.backends.mlx.sampler import TokenSampler
from engine.backends.runtime import RequestStream
from engine.backends.speculative import RowCost
from engine.errors import GrammarDeadEnd
from engine.types import FinishReason, TokenLogprob

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Sequence:
    """Runtime state of one request."""

    stream: RequestStream
    prompt: list[int]
    sampler: TokenSampler
    cancelled: bool = False

    @property
    def request_id(self) -> str:
        return self.stream.request_id


# Loops still open at interpreter exit are closed then: MLX aborts the process if a thread's
# streams outlive Python (see GenerationLoop._run).
_OPEN_LOOPS: weakref.WeakSet[GenerationLoop] = weakref.WeakSet()


@atexit.register
def _close_open_loops() -> None:
    for loop in list(_OPEN_LOOPS):
        loop.close()


class GenerationLoop(AdmissionQueue[Sequence]):
    """The model's thread and its queue of requests.

    Args:
        loader: Loads the model; called on the new thread.
        n_ctx: Most tokens (prompt and answer) one request may hold.
        prefill_chunk: Most prompt tokens computed in one step (bounds memory; cancellation is checked between).
        max_waiting: Most requests queued before new ones are refused.

    Raises:
        ModelLoadError: (from the constructor) the loader failed; the thread has ended.
    """

    def __init__(
        self,
        loader: Callable[[], LoadedModel],
        *,
        n_ctx: int | Callable[[LoadedModel], int],
        prefill_chunk: int = 512,
        max_waiting: int = 64,
    ) -> None:
        self.prefill_chunk = prefill_chunk
        super().__init__(max_waiting, max_running=1)
        self.loaded: LoadedModel | None = None
        self.n_ctx = 0
        self._running: Sequence | None = None
        self._cache: list[Any] | None = None
        self._cache_tokens: list[int] = []
        self.stats_requests = 0
        self.stats_prompt_tokens = 0
        self.stats_cached_tokens = 0
        self.stats_generated_tokens = 0
        self.stats_draft_tokens = 0  # speculative decoding: tokens drafted, and of them kept
        self.stats_accepted_tokens = 0
        self.row_cost = RowCost()  # what a drafted row adds to a step, measured
        ready = threading.Event()
        failure: list[BaseException] = []

        def start() -> None:
            try:
                self.loaded = loader()
                self.n_ctx = n_ctx(self.loaded) if callable(n_ctx) else n_ctx
            except BaseException as exc:  # handed to the loading thread, which raises it
                failure.append(exc)
                self.loaded = None
                mx.clear_streams()
                return
            finally:
                ready.set()
            self._run()

        self._thread = threading.Thread(target=start, name="mlx-generation", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            raise failure[0]
        _OPEN_LOOPS.add(self)

    # -- called from request threads ------------------------------------------------------------
    def stats(self) -> BackendStats:
        with self._cond:
            running = 1 if self._running is not None else 0
            waiting = len(self._waiting)
        return BackendStats(
            running=running, waiting=waiting, slots=1, n_ctx_per_sequence=self.n_ctx, max_waiting=self.max_waiting,
            requests=self.stats_requests, prompt_tokens=self.stats_prompt_tokens,
            generated_tokens=self.stats_generated_tokens, prefix_cache_tokens=self.stats_cached_tokens,
            details={"draft_tokens": self.stats_draft_tokens, "accepted_draft_tokens": self.stats_accepted_tokens},
        )  # fmt: skip

    def close(self) -> None:
        """Cancel every request, stop the thread and free the model."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=60)

    # -- the model's thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stopping and not self._waiting:
                        self._cond.wait()
                    if self._stopping:
                        for seq in self._waiting:
                            self._finish(seq, "cancelled")
                        self._waiting.clear()
                        return
                    seq = self._waiting.popleft()
                    self._running = seq
                try:
                    self._generate(seq)
                except GrammarDeadEnd as exc:  # the request's own grammar, which llguidance gave up on: it alone ends
                    self._cache = None  # the step's cells are in the cache, its token is not
                    self._cache_tokens = []
                    if not seq.stream.finished:
                        self._release(seq)
                        seq.stream.finish("error", error=str(exc), code=exc.code)
                except Exception as exc:  # never let one request kill the thread
                    log.exception("MLX generation failed")
                    self._cache = None  # its state is unknown now
                    self._cache_tokens = []
                    self._finish(seq, "error", error=f"Generation failed: {exc}.")
                finally:
                    with self._cond:
                        self._running = None
        finally:
            self._cache = None
            self.loaded = None
            mx.clear_cache()
            # MLX's streams of this thread must be destroyed before the thread (and Python) ends,
            # or the process aborts at exit ("terminate called without an active exception").
            mx.clear_streams()

    def _stop_requested(self, seq: Sequence) -> bool:
        return seq.cancelled or self._stopping

    @property
    def _model(self) -> LoadedModel:
        """The model, on this loop's thread while it runs."""
        if self.loaded is None:
            raise RuntimeError("the MLX model is not loaded")
        return self.loaded

    def _prepare_cache(self, prompt: list[int]) -> tuple[list[Any], int]:
        """Reuse the KV of the longest cached prefix of ``prompt``; returns the cache and that length."""
        cache = self._cache
        if cache is None or not can_trim_prompt_cache(cache):
            cache = self._cache = make_prompt_cache(self._model.model)
            self._cache_tokens = []
        keep = min(common_prefix(self._cache_tokens, prompt), len(prompt) - 1)
        drop = len(self._cache_tokens) - keep
        if drop:
            trim_prompt_cache(cache, drop)
            del self._cache_tokens[keep:]
        return cache, keep

    def _feed(self, tokens: list[int]) -> mx.array:
        """Run ``tokens`` through the model into the cache; the logits of each, ``[len(tokens), n_vocab]``, lazily."""
        logits = self._model.model(mx.array(tokens, dtype=mx.int32)[None], cache=self._cache)
        self._cache_tokens.extend(tokens)
        return logits[0]

    def _trim(self, n: int) -> None:
        """Forget the last ``n`` tokens of the cache (a draft's tokens that were not kept)."""
        if n > 0 and self._cache is not None:
            trim_prompt_cache(self._cache, n)
            del self._cache_tokens[-n:]

    def _generate(self, seq: Sequence) -> None:
        self.stats_requests += 1
        self.stats_prompt_tokens += len(seq.prompt)
        if self._stop_requested(seq):
            self._finish(seq, "cancelled")
            return
        cache, cached = self._prepare_cache(seq.prompt)
        seq.stream.cached_tokens = cached
        self.stats_cached_tokens += cached
        todo = seq.prompt[cached:]
        # Prefill all but the last prompt token, a chunk at a time; only the cache is evaluated.
        for start in range(0, len(todo) - 1, self.prefill_chunk):
            if self._stop_requested(seq):
                self._finish(seq, "cancelled")
                return
            self._feed(todo[start : min(start + self.prefill_chunk, len(todo) - 1)])
            mx.eval([c.state for c in cache])
        token = todo[-1]
        while True:
            if self._stop_requested(seq):
                self._finish(seq, "cancelled")
                return
            draft = self._draft(seq)
            t0 = time.perf_counter()
            logits = self._feed([token, *draft])
            mx.eval(logits)
            self.row_cost.add(1 + len(draft), time.perf_counter() - t0)
            if draft:
                seq.stream.verifying(len(draft))
            # Each row in order: the sampler's draw there is the output's next token, and the drafted token
            # after it stands only while it is that draw.
            kept, done = 0, False
            for j in range(len(draft) + 1):
                row = logits[j]
                token = seq.sampler.sample(row, seq.prompt, seq.stream.generated)
                agreed = j < len(draft) and token == draft[j]
                done = self._advance(seq, token, row, kept_draft=agreed, position=len(self._cache_tokens) - len(draft) + j)
                if done or not agreed:
                    break
                kept += 1
            self._trim(len(draft) - kept)
            self._record(seq, len(draft), kept)
            if done:
                return

    def _draft(self, seq: Sequence) -> list[int]:
        """What ``seq`` drafts this step: within its context and its answer's length, and only while the cache
        can forget a refused draft's cells."""
        drafter = seq.stream.drafter
        if drafter is None or self._cache is None or not can_trim_prompt_cache(self._cache):
            return []
        limit = self.n_ctx - len(self._cache_tokens) - 2
        if seq.stream.params.max_tokens is not None:
            limit = min(limit, seq.stream.params.max_tokens - len(seq.stream.generated) - 1)
        return drafter.propose(limit, self.row_cost.share) if limit > 0 else []

    def _record(self, seq: Sequence, drafted: int, kept: int) -> None:
        if not drafted or seq.stream.drafter is None:
            return
        seq.stream.drafter.record(drafted, kept)
        self.stats_draft_tokens += drafted
        self.stats_accepted_tokens += kept

    def _advance(self, seq: Sequence, token: int, logits: mx.array, *, kept_draft: bool = False, position: int) -> bool:
        """Stream ``token``, the one after the first ``position`` tokens of the sequence; returns whether the
        generation is over."""
        lp: tuple[TokenLogprob, ...] = ()
        if seq.stream.params.logprobs is not None:
            lp = (self._logprob(seq, logits, token),)
        n_before = len(seq.stream.generated)
        done = seq.stream.push(token, logprobs=lp, context_full=position + 1 >= self.n_ctx, kept_draft=kept_draft)
        self.stats_generated_tokens += len(seq.stream.generated) - n_before
        if done:
            self._release(seq)
        return done

    def _logprob(self, seq: Sequence, logits: mx.array, token: int) -> TokenLogprob:
        vocab = self._model.vocab
        lp, top_ids = seq.sampler.logprobs(logits)
        values = cast(list[float], lp.tolist())  # annotated list-or-scalar; a 1-D array gives a list
        top = []
        for t in top_ids:
            piece = vocab.piece(t)
            top.append((piece.decode("utf-8", errors="replace"), float(values[t]), tuple(piece)))
        piece = vocab.piece(token)
        return TokenLogprob(
            token=piece.decode("utf-8", errors="replace"),
            token_id=token,
            logprob=float(values[token]),
            bytes=tuple(piece),
            top=tuple(top),
            top_ids=tuple(int(t) for t in top_ids),
        )

    def _finish(self, seq: Sequence, reason: FinishReason, *, error: str | None = None) -> None:
        if not seq.stream.finished:
            self._release(seq)
            seq.stream.finish(reason, error=error)

    def _release(self, seq: Sequence) -> None:
        with self._cond:
            self._by_id.pop(seq.request_id, None)


__all__ = ["GenerationLoop", "Sequence"]
