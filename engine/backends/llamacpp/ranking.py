"""Reranking on llama.cpp: a GGUF cross-encoder scores (query, document) pairs with rank pooling.

A reranker is a model with a classification head (``cls``/``cls.output`` tensors, the BERT, RoBERTa and
XLM-RoBERTa rerankers and Qwen3's) or a ``rerank`` prompt template. llama.cpp's rank pooling runs the head
over the pooled hidden state and gives one score per sequence. A pair is put together as llama-server
puts it, so a file scores the same here as there:

- with a ``tokenizer.chat_template.rerank`` template: ``{query}`` and ``{document}`` replaced in it, the
  result tokenized with special tokens parsed;
- else: ``[BOS] query [EOS] [SEP] document [EOS]``, each special token only where the vocabulary asks for
  it (``add_bos``, ``add_eos``, ``add_sep``; SEP stands in for a missing EOS), the texts tokenized without
  special tokens of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import cached_property

import llama_cpp

from engine.backends.llamacpp.batch import fill_batch, run_rows, scratch_batch
from engine.backends.llamacpp.model import GGUFModel
from engine.backends.llamacpp.scheduler import DecodeLoop
from engine.errors import InvalidRequest, ModelLoadError, RequestCancelled

# Seconds of scoring done on the decode thread between two decode steps (at least one pair each time).
RANK_SLICE_SECONDS = 0.02
_HEAD_TENSORS = frozenset({"cls.weight", "cls.output.weight"})


def has_rank_head(model: GGUFModel) -> bool:
    """Whether ``model`` can rerank: a rerank template, classifier labels or a classification head."""
    if model.meta("tokenizer.chat_template.rerank") is not None:
        return True
    if llama_cpp.llama_model_cls_label(model.model_ptr, 0):
        return True
    from engine.catalog.gguf_header import read_gguf_tensors

    try:
        _, tensors = read_gguf_tensors(model.path)
    except (OSError, ValueError):
        return False
    return any(name in _HEAD_TENSORS for name, *_ in tensors)


def pair_tokens(model: GGUFModel, query: str, document: str) -> list[int]:
    """The tokens llama-server scores for ``query`` and ``document`` (see the module's docstring)."""
    template = model.meta("tokenizer.chat_template.rerank")
    if template is not None:
        prompt = template.replace("{query}", query).replace("{document}", document)
        return model.tokenize(prompt, add_special=False, parse_special=True)
    vocab = model.vocab
    eos = int(llama_cpp.llama_vocab_eos(vocab))
    if eos == llama_cpp.LLAMA_TOKEN_NULL:
        eos = int(llama_cpp.llama_vocab_sep(vocab))
    add_eos = bool(llama_cpp.llama_vocab_get_add_eos(vocab))
    tokens: list[int] = [model.bos_id] if model.add_bos else []
    tokens += model.tokenize(query, add_special=False, parse_special=False)
    if add_eos:
        tokens.append(eos)
    if llama_cpp.llama_vocab_get_add_sep(vocab):
        tokens.append(int(llama_cpp.llama_vocab_sep(vocab)))
    tokens += model.tokenize(document, add_special=False, parse_special=False)
    if add_eos:
        tokens.append(eos)
    return tokens


class Ranker:
    """Scores pairs with one model's rank-pooling context, on its decode loop's thread.

    Args:
        model: The loaded reranker.
        loop: The model's decode loop (its thread owns llama.cpp's compute threads; scoring uses as many
            threads as decoding does at the time).
    """

    def __init__(self, model: GGUFModel, loop: DecodeLoop) -> None:
        self.model = model
        self.loop = loop
        self._ctx = None

    @cached_property
    def can_rank(self) -> bool:
        return has_rank_head(self.model)

    def rerank(
        self, query: str, documents: Sequence[str], *, cancelled: Callable[[], bool] | None = None
    ) -> tuple[list[float], int]:
        """One score per document (higher: more relevant) and the tokens scored.

        Pairs are scored in slices of about :data:`RANK_SLICE_SECONDS`, each between two decode steps.

        Raises:
            InvalidRequest: a document and the query together are longer than the context.
            RequestCancelled: ``cancelled`` said so between two slices.
        """
        pairs = [pair_tokens(self.model, query, doc) for doc in documents]
        limit = self.loop.n_ctx_seq
        for i, tokens in enumerate(pairs):
            if len(tokens) > limit:
                raise InvalidRequest(
                    f"Document {i} with the query is {len(tokens)} tokens but this model's context holds {limit}; "
                    "shorten it or load the model with a larger context.",
                    param="documents",
                )
        scores: list[float] = []
        while len(scores) < len(pairs):
            if cancelled is not None and cancelled():
                raise RequestCancelled()
            start = len(scores)
            scores.extend(self.loop.call(lambda start=start: self._score(pairs, start)))
        return scores, sum(len(t) for t in pairs)

    def _context(self):
        if self._ctx is None:
            params = llama_cpp.llama_context_default_params()
            params.n_ctx = params.n_batch = params.n_ubatch = self.loop.n_ctx_seq  # a pair in one batch
            params.n_seq_max = 1
            params.embeddings = True
            params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_RANK
            # Attention in f32: flash attention keeps K and V in f16, which moves scores by ~1e-3.
            params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            params.n_threads = params.n_threads_batch = self.loop.n_threads
            self._ctx = llama_cpp.llama_init_from_model(self.model.model_ptr, params)
            if self._ctx is None:
                raise ModelLoadError(
                    str(self.model.path),
                    f"llama.cpp could not create a reranking context of {self.loop.n_ctx_seq} tokens; "
                    "unload another model or load this one with a shorter context.",
                )
        return self._ctx

    def _score(self, pairs: list[list[int]], start: int) -> list[float]:
        """Score ``pairs`` from ``start`` on, one at least, until :data:`RANK_SLICE_SECONDS` have passed."""
        t0 = time.perf_counter()
        ctx = self._context()
        llama_cpp.llama_set_n_threads(ctx, self.loop.n_threads, self.loop.n_threads)
        mem = llama_cpp.llama_get_memory(ctx)  # a causal reranker's KV cache (an encoder has none)
        out: list[float] = []
        for tokens in pairs[start:]:
            if out and time.perf_counter() - t0 > RANK_SLICE_SECONDS:
                break
            if mem:
                llama_cpp.llama_memory_clear(mem, True)
            with scratch_batch(len(tokens)) as batch:
                fill_batch(batch, run_rows(tokens, 0))
                if llama_cpp.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed while reranking")
                out.append(float(llama_cpp.llama_get_embeddings_seq(ctx, 0)[0]))
        return out

    def close(self) -> None:
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None


__all__ = ["Ranker", "has_rank_head", "pair_tokens", "RANK_SLICE_SECONDS"]
