"""A draft model for speculative decoding: a smaller GGUF of the same vocabulary, run in the target's process
and decode loop, that proposes each request's next few tokens (``hearth serve --speculative draft:MODEL``).

The draft has a context of its own with one sequence per slot of the target's loop. Before a step, each
request's :class:`ModelDrafter` brings its sequence's KV up to the request's text (the cells past a refused
draft are removed, the kept tokens and the new one computed, a long prompt a block per step) and drafts up
to ``k`` tokens one at a time: greedily, or, where the request samples plainly above temperature 0, drawn
from the draft's own filtered distribution ``q`` so that :func:`accept_or_resample` judges them against
the target's. Drafting stops early where the draft is unsure of its next token. The loop's verification
(engine.backends.llamacpp.scheduler) is the one every drafter goes through.

A released sequence keeps its tokens, so the next turn of a chat drafts from the KV its last turn left.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import llama_cpp
import numpy as np

from engine.backends.base import common_prefix
from engine.backends.llamacpp.batch import Row, fill_batch
from engine.backends.llamacpp.model import GGUFModel, check_gguf_file
from engine.backends.speculative import DraftSource, SpeculativeOptions, best_length
from engine.backends.speculative_sampling import accept_or_resample, filtered_distribution, sample
from engine.errors import DraftModelUnusable
from engine.fit.draft import DRAFT_BLOCK, draft_vocabulary_mismatch
from engine.types import SamplingParams

log = logging.getLogger(__name__)

# A draft ends at the first token the draft model gives less than this probability: past it, the rest of
# the draft is mostly refused and only costs the draft's steps and the target's rows.
DRAFT_P_MIN = 0.6
# Most prompt tokens the draft computes for a request in one step (a long prompt takes several steps, with no
# draft until it is done), so that catching up never stalls the other streams for long. The draft's micro-batch
# too: the memory model sizes its compute buffer by it.
CATCHUP_BLOCK = DRAFT_BLOCK


class DraftSlot:
    """One sequence of the draft's context: the tokens whose KV it holds, and the request drafting in it."""

    __slots__ = ("seq_id", "tokens", "holder", "last_used")

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.tokens: list[int] = []
        self.holder: ModelDrafter | None = None
        self.last_used = 0.0


class DraftModel:
    """The draft model's weights and context, shared by the requests of one target model's loop.

    Args:
        model: The draft's GGUF, whose vocabulary is the target's.
        n_vocab: The target's vocabulary size (a drafted id past it ends the draft).
        n_seq: Sequences, one per slot of the target's loop.
        n_ctx_seq: Context length of each sequence.
        threads: How many threads the loop computes on now.
        flash_attn: Use flash attention.
    """

    def __init__(
        self, model: GGUFModel, *, n_vocab: int, n_seq: int, n_ctx_seq: int, threads: Callable[[], int], flash_attn: bool = True
    ) -> None:
        self.model = model
        self.n_vocab = n_vocab
        self.threads = threads
        self._n_threads = threads()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx_seq * n_seq
        params.n_batch = params.n_ubatch = CATCHUP_BLOCK
        params.n_seq_max = n_seq
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.n_threads = params.n_threads_batch = self._n_threads
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model.model_ptr, params)
        if not ctx:
            raise MemoryError(f"llama.cpp could not create the draft model's context of {params.n_ctx} tokens")
        mem = llama_cpp.llama_get_memory(ctx)
        if mem is None:
            llama_cpp.llama_free(ctx)
            raise DraftModelUnusable(
                f"Draft model '{model.path.name}' keeps no KV cache (an encoder); pick a generative model of the family."
            )
        self.ctx: llama_cpp.llama_context_p = ctx
        self.mem = mem
        self.batch = llama_cpp.llama_batch_init(CATCHUP_BLOCK, 0, 1)
        self.slots = [DraftSlot(i) for i in range(n_seq)]
        self.seconds = 0.0  # time spent in the draft's decode calls, for the stats

    @classmethod
    def load(cls, path: Path, target: GGUFModel, *, target_name: str, n_gpu_layers: int = 0, **context) -> DraftModel:
        """Load the draft at ``path`` for ``target``, whose vocabulary it must have (``context``: as the
        constructor's).

        Raises:
            ModelLoadError: the file cannot be loaded.
            DraftModelUnusable: its vocabulary is not the target's.
        """
        try:
            why = draft_vocabulary_mismatch(target.path, path)
        except (OSError, ValueError) as exc:
            check_gguf_file(path)  # a missing or non-GGUF file: the message says so
            why = f"its vocabulary cannot be read: {exc}"
        if why is not None:
            raise DraftModelUnusable(
                f"Draft model '{path.name}' cannot draft for '{target_name}' because their vocabularies differ "
                f"({why}); pick a draft model of the same family, or use --speculative auto."
            )
        model = GGUFModel(path, n_gpu_layers=n_gpu_layers)
        try:
            return cls(model, n_vocab=target.n_vocab, **context)
        except (MemoryError, DraftModelUnusable):
            model.close()
            raise

    def drafter(self, prompt: Sequence[int], options: SpeculativeOptions, params: SamplingParams, *, plain: bool) -> ModelDrafter:
        """A drafter for one request whose prompt is ``prompt`` (``plain``: see :class:`ModelDrafter`)."""
        return ModelDrafter(self, prompt, options, params, plain=plain)

    # -- on the decode thread ---------------------------------------------------------------------
    def draft(self, d: ModelDrafter, k: int) -> list[int]:
        """Bring ``d``'s sequence up to its text and draft up to ``k`` tokens after it (none while a long
        prompt is still being computed)."""
        slot = d.slot or self._acquire(d)
        if slot is None:
            return []
        if (n_threads := self.threads()) != self._n_threads:
            self._n_threads = n_threads
            llama_cpp.llama_set_n_threads(self.ctx, n_threads, n_threads)
        text = d.history
        n = d.base + common_prefix(slot.tokens[d.base :], text[d.base :])
        n = min(n, len(text) - 1)  # the last token is computed again for its logits, if need be
        if n < len(slot.tokens):
            llama_cpp.llama_memory_seq_rm(self.mem, slot.seq_id, n, -1)
            del slot.tokens[n:]
        todo = text[n:]
        if len(todo) > CATCHUP_BLOCK:  # a block of the prompt now, the rest in the next steps
            self._decode([(t, n + i, slot.seq_id, False) for i, t in enumerate(todo[:CATCHUP_BLOCK])])
            slot.tokens.extend(todo[:CATCHUP_BLOCK])
            d.base = len(slot.tokens)
            return []
        self._decode([(t, n + i, slot.seq_id, i == len(todo) - 1) for i, t in enumerate(todo)])
        slot.tokens.extend(todo)
        d.base = len(text)
        row = len(todo) - 1
        out: list[int] = []
        dists: list[np.ndarray] = []
        for i in range(k):
            token, sure, q = d.choose(self._logits(row))
            if sure < DRAFT_P_MIN or token >= self.n_vocab:
                break
            out.append(token)
            if q is not None:
                dists.append(q)
            if i == k - 1:
                break
            self._decode([(token, len(slot.tokens), slot.seq_id, True)])
            slot.tokens.append(token)
            row = 0
        d.set_draft(out, dists)
        return out

    def release(self, d: ModelDrafter) -> None:
        """``d``'s request ended: its sequence is free, and keeps its tokens for the next turn."""
        slot = d.slot
        if slot is not None and slot.holder is d:
            slot.holder = None
            slot.last_used = time.monotonic()
        d.slot = None

    def _acquire(self, d: ModelDrafter) -> DraftSlot | None:
        free = [s for s in self.slots if s.holder is None]
        if not free:
            return None
        slot = max(free, key=lambda s: (common_prefix(s.tokens, d.history), -s.last_used))
        slot.holder = d
        d.slot = slot
        d.base = common_prefix(slot.tokens, d.history)
        return slot

    def _decode(self, items: list[Row]) -> None:
        fill_batch(self.batch, items)
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self.ctx, self.batch)
        self.seconds += time.perf_counter() - t0
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} in the draft model")

    def _logits(self, row: int) -> np.ndarray:
        """The draft's logits at batch ``row`` over the target's vocabulary (padding past either's end goes)."""
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, row)
        logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.model.n_vocab,))
        if len(logits) >= self.n_vocab:
            return logits[: self.n_vocab]
        return np.concatenate([logits, np.full(self.n_vocab - len(logits), -np.inf, dtype=logits.dtype)])

    def close(self) -> None:
        if self.model.ptr is not None:
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ctx)
            self.model.close()


class ModelDrafter(DraftSource):
    """One request's drafts from the draft model.

    Args:
        draft: The draft model.
        prompt: The request's prompt tokens (its output is pushed as it comes).
        options: Draft sizes.
        params: The request's sampling parameters.
        plain: Whether the request samples plainly above temperature 0 (``plain_sampling``): its drafts are
            then drawn from the draft's distribution and judged by speculative sampling; otherwise they are
            the draft's greedy picks, kept while they are the request's own sampler's draws.
    """

    __slots__ = ("draft", "history", "params", "plain", "rng", "slot", "base", "_last", "_dists")

    def __init__(
        self, draft: DraftModel, prompt: Sequence[int], options: SpeculativeOptions, params: SamplingParams, *, plain: bool
    ) -> None:
        super().__init__(options.max_draft)
        self.draft = draft
        self.history = list(prompt)
        self.params = params
        self.plain = plain
        self.rng = np.random.default_rng(params.seed)
        self.slot: DraftSlot | None = None
        self.base = 0  # how much of ``history`` the slot's tokens are known to hold
        self._last: list[int] = []
        self._dists: list[np.ndarray] = []

    def push(self, token: int) -> None:
        self.history.append(token)

    def propose(self, limit: int, row_cost: float = 0.0) -> list[int]:
        if self.paused():
            return []
        # The user chose the draft model: it drafts whatever a row costs on this machine now (as ``ngram``), so
        # what is drafted never follows the machine's load; a draft ends where the draft is unsure (DRAFT_P_MIN),
        # shortens as the keep rate falls, and pauses after drafts refused outright.
        k = min(best_length(self.keep_rate, 0.0, self.max_draft), limit)
        if k <= 0:
            return []
        return self.draft.draft(self, k)

    def choose(self, logits: np.ndarray) -> tuple[int, float, np.ndarray | None]:
        """The next drafted token from the draft's ``logits``, how sure the draft is of it, and the
        distribution it was drawn from (None for a greedy pick)."""
        if self.plain:
            q = filtered_distribution(logits, self.params)
            token = sample(q, self.rng)
            return token, float(q.max()), q
        token = int(logits.argmax())
        top = float(logits[token])
        return token, 1.0 / float(np.exp(logits.astype(np.float64) - top).sum()), None

    def set_draft(self, tokens: list[int], dists: list[np.ndarray]) -> None:
        self._last, self._dists = tokens, dists

    def judge(self, j: int, logits) -> int | None:
        if not self.plain or j >= len(self._dists):
            return None
        p = filtered_distribution(logits, self.params)
        return accept_or_resample(p, self._dists[j], self._last[j], self.rng)

    def close(self) -> None:
        self.draft.release(self)


__all__ = ["DRAFT_P_MIN", "DraftModel", "ModelDrafter"]
