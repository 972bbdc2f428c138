"""Embeddings on llama.cpp: mean-pooled and L2-normalised, computed on the decode loop's thread in slices.

A slice is about :data:`EMBED_SLICE_SECONDS` of work between two decode steps, so no embedding request holds up
the requests that are generating: many short texts are cut between texts, and one long text of a causal model
(a decoder, such as the chat model itself) within the text. Its tokens go in 4 to 256 at a time, each group
attending to the ones before it through the embedding context's KV cache, exactly as in one call; the pooling
(the mean of every position's last hidden state) is summed here slice by slice. An encoder (BERT and kin) attends
both ways, so llama.cpp computes its input in one call; its context (512 tokens for all-MiniLM) bounds what that
call costs.

Short texts go in together: up to :data:`MAX_PACKED_TEXTS` of them in one call, each a sequence of its own (its
tokens attend only to each other, as alone), as llama-server packs its slots' inputs. A list of thousands of short
texts (a search index's passages, a classifier's sentences) costs tens of calls, not thousands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from itertools import accumulate, chain

import llama_cpp
import numpy as np

from engine.backends.llamacpp.batch import fill_batch, run_rows, scratch_batch
from engine.backends.llamacpp.model import GGUFModel
from engine.backends.llamacpp.scheduler import DecodeLoop
from engine.errors import ContextLengthExceeded, RequestCancelled

# Seconds of embedding done on the decode thread between two decode steps (at least one slice each time).
EMBED_SLICE_SECONDS = 0.02
# Seconds of one call of short texts packed together while nothing generates: what a chat that comes in meanwhile
# waits at most before its prompt is read; longer than a slice between steps, as each call costs its own overhead.
EMBED_IDLE_CALL_SECONDS = 0.1
# Tokens of one long text computed in one llama.cpp call: sized from the measured rate to take about
# EMBED_SLICE_SECONDS, within these bounds (the most is the size of the loop's own prompt blocks on the CPU).
# The least is small because a chat that comes in waits for the slice under way: on a busy 2-core machine a
# token took 20-40 ms, so slices of 16 made a chat beside a long input 2.3-4.5 times as slow as alone.
MIN_SLICE_TOKENS = 4
MAX_SLICE_TOKENS = 256
# Most texts computed together in one call, each a sequence of the embedding context (whose KV cells they share).
MAX_PACKED_TEXTS = 64


class Embedder:
    """One model's embedding context, fed on its decode loop's thread.

    Args:
        model: The loaded model.
        loop: Its decode loop (its thread owns llama.cpp's compute threads; embedding uses as many).
        max_slice_tokens: Most tokens of a text in one llama.cpp call (a causal model's).
        idle_call_seconds: About how long one call takes while nothing generates.
    """

    def __init__(
        self, model: GGUFModel, loop: DecodeLoop, *, max_slice_tokens: int = MAX_SLICE_TOKENS,
        idle_call_seconds: float = EMBED_IDLE_CALL_SECONDS,
    ) -> None:  # fmt: skip
        self.model = model
        self.loop = loop
        self.max_slice_tokens = max(1, max_slice_tokens)
        self.idle_call_seconds = idle_call_seconds
        self.slices = 0  # llama.cpp calls made, for the tests of how they interleave with decode steps
        self._ctx = None
        self._mem = None
        self._rate = 0.0  # tokens a second of the last slice of a long text
        # Held by the request whose text is in the KV cache half computed, until it is done: requests embed
        # in turns, slice by slice, except inside another's long text (whose cells the next text clears).
        self._kv = threading.Lock()

    def embed(
        self, texts: Sequence[str], *, cancelled: Callable[[], bool] | None = None, truncate: bool = False
    ) -> tuple[list[list[float]], int]:
        """Mean-pooled, L2-normalised embeddings of ``texts`` and the tokens they took.

        Raises:
            ContextLengthExceeded: a text is longer than the context (and ``truncate`` is off).
            RequestCancelled: ``cancelled`` said so between two slices.
            MemoryError: llama.cpp could not make the embedding context.
        """
        causal = self.loop.call(self._context)
        inputs = [self._tokens(text, causal, truncate) for text in texts]
        job = _Job(inputs, self.model.n_embd)
        held = False
        try:
            while not job.done:
                if cancelled is not None and cancelled():
                    raise RequestCancelled()
                if not held:
                    self._kv.acquire()
                    held = True
                self.loop.call(lambda: self._run(job, causal))
                if job.offset == 0:  # between two texts: another request may go
                    self._kv.release()
                    held = False
        finally:
            if held:
                self._kv.release()
        return job.vectors, sum(len(t) for t in inputs)

    def _tokens(self, text: str, causal: bool, truncate: bool) -> list[int]:
        limit = self.loop.n_ctx_seq
        model = self.model
        if causal:
            tokens = model.tokenize_prompt(text) or [model.bos_id]
        else:  # an encoder wants its own [CLS] ... [SEP] around the text
            tokens = model.tokenize(text, add_special=True, parse_special=False)
        if len(tokens) <= limit:
            return tokens
        if not truncate:
            raise ContextLengthExceeded(len(tokens), limit)
        # an encoder's closing [SEP] stays: the text's end is what goes
        return tokens[:limit] if causal else tokens[: limit - 1] + tokens[-1:]

    def _context(self) -> bool:
        """Make the embedding context on first use (on the decode thread); whether the model is causal."""
        if self._ctx is None:
            n_ctx = self.loop.n_ctx_seq
            params = llama_cpp.llama_context_default_params()
            params.n_ctx = params.n_batch = params.n_ubatch = n_ctx  # an encoder's input in one batch
            # sequences for short texts packed in one call, sharing the context's cells (a long text has all of them)
            params.n_seq_max = MAX_PACKED_TEXTS
            params.kv_unified = True
            params.embeddings = True
            # Every position's hidden state, pooled here: llama.cpp's own mean covers only one call's tokens.
            params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE
            params.n_threads = params.n_threads_batch = self.loop.n_threads
            ctx = llama_cpp.llama_init_from_model(self.model.model_ptr, params)
            if ctx is None:
                raise MemoryError(
                    f"llama.cpp could not create an embedding context of {n_ctx} tokens; "
                    "unload another model or load this one with a shorter context."
                )
            self._ctx = ctx
            self._mem = llama_cpp.llama_get_memory(ctx)  # None for an encoder, which keeps no KV cache
        # A model that attends both ways (an encoder, or a decoder made bidirectional) sees its input in one call.
        return bool(self._mem) and bool(llama_cpp.llama_get_causal_attn(self._ctx))

    def _sized(self, seconds: float = EMBED_SLICE_SECONDS) -> int:
        """Tokens one call computes in about ``seconds``, at the last call's rate."""
        return max(MIN_SLICE_TOKENS, int(self._rate * seconds) if self._rate > 0 else 2 * MIN_SLICE_TOKENS)

    def _seconds(self) -> float:
        """What one call may take: a slice while requests generate, else an idle call."""
        return EMBED_SLICE_SECONDS if self.loop.generating else self.idle_call_seconds

    def _slice_tokens(self) -> int:
        """Tokens of a long text in one call."""
        return max(1, min(self.max_slice_tokens, self._sized(self._seconds())))

    def _budget(self) -> int:
        """Tokens of whole texts in one call."""
        return min(self.loop.n_ctx_seq, self._sized(self._seconds()))

    def _pack(self, job: _Job) -> list[list[int]]:
        """The texts from the current one on that go in one call: at most :data:`MAX_PACKED_TEXTS`, together about a
        call's worth of tokens (the first whole, whatever its length), within the context."""
        budget = self._budget()
        texts = [job.inputs[job.index]]
        total = len(texts[0])
        for tokens in job.inputs[job.index + 1 : job.index + MAX_PACKED_TEXTS]:
            if total + len(tokens) > budget:
                break
            texts.append(tokens)
            total += len(tokens)
        return texts

    def _run(self, job: _Job, causal: bool) -> None:
        """Work on ``job`` for about :data:`EMBED_SLICE_SECONDS` (one slice at least)."""
        t0 = time.perf_counter()
        ctx = self._ctx
        if ctx is None:
            raise RuntimeError("the embedding context was closed")
        llama_cpp.llama_set_n_threads(ctx, self.loop.n_threads, self.loop.n_threads)  # as many as decoding uses now
        first = True
        while not job.done and (first or time.perf_counter() - t0 < EMBED_SLICE_SECONDS):
            first = False
            tokens = job.inputs[job.index]
            start = job.offset
            if start == 0 and self._mem:
                llama_cpp.llama_memory_clear(self._mem, True)
            t1 = time.perf_counter()
            if start == 0 and (len(tokens) <= self._budget() or not causal):  # whole: within a call's tokens
                texts = self._pack(job)  # whole texts, the current one first
                for text, hidden_sum in zip(texts, self._decode_texts(ctx, texts), strict=True):
                    job.add(hidden_sum, len(text))
                n = sum(len(t) for t in texts)
            else:  # a long text of a causal model: its next tokens, after the ones in the KV cache
                end = min(len(tokens), start + self._slice_tokens())
                job.add(self._decode_texts(ctx, [tokens[start:end]], start)[0], end)
                n = end - start
            if n >= MIN_SLICE_TOKENS:
                self._rate = n / max(time.perf_counter() - t1, 1e-6)

    def _decode_texts(self, ctx: llama_cpp.llama_context_p, texts: list[list[int]], pos: int = 0) -> list[np.ndarray]:
        """For each of ``texts`` (each its own sequence, at positions from ``pos``, after the tokens before them in
        the KV cache), the sum of its tokens' last hidden states, in one call."""
        n = sum(len(t) for t in texts)
        with scratch_batch(n) as batch:
            fill_batch(batch, chain.from_iterable(run_rows(t, pos, seq_id=k) for k, t in enumerate(texts)))
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed while embedding")
            self.slices += 1
            hidden = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings(ctx), shape=(n, self.model.n_embd))
            ends = list(accumulate(len(t) for t in texts))
            return [hidden[e - len(t) : e].sum(axis=0, dtype=np.float64) for t, e in zip(texts, ends, strict=True)]

    def close(self) -> None:
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
            self._mem = None


class _Job:
    """One request's texts and how far their embedding has got."""

    def __init__(self, inputs: list[list[int]], n_embd: int) -> None:
        self.inputs = inputs
        self.vectors: list[list[float]] = []
        self.index = 0  # the text being embedded
        self.offset = 0  # its tokens computed so far
        self._sum = np.zeros(n_embd, dtype=np.float64)

    @property
    def done(self) -> bool:
        return self.index >= len(self.inputs)

    def add(self, hidden_sum: np.ndarray, end: int) -> None:
        """Pool the hidden states of the current text's tokens up to ``end``; a text done becomes its vector."""
        self._sum += hidden_sum
        self.offset = end
        tokens = self.inputs[self.index]
        if end < len(tokens):
            return
        vec = self._sum / len(tokens)
        norm = float(np.linalg.norm(vec)) or 1.0
        self.vectors.append((vec / norm).tolist())
        self._sum[:] = 0.0
        self.index += 1
        self.offset = 0


__all__ = ["EMBED_SLICE_SECONDS", "MAX_PACKED_TEXTS", "Embedder"]
