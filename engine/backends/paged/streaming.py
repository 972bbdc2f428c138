"""Turns engine step outputs into each request's stream of chunks (engine thread only)."""

from __future__ import annotations

import threading

from engine.backends.paged.llm_engine import LLMEngine, StepOutputs
from engine.backends.paged.sequence import Sequence
from engine.gguf.vocab import Vocabulary
from engine.tools.guidance import grammar_failure
from engine.types import FinishReason, TokenLogprob


class StreamWriter:
    """Hands each sampled token to its request's stream and frees a sequence once its stream ends.

    Args:
        engine: The engine whose sequences these are (its ``finish`` frees their blocks).
        tokenizer: For byte pieces of tokens (log-probabilities' texts).
        by_id: The admission queue's request-id -> sequence map, guarded by ``lock``.
        lock: The admission queue's condition lock.
    """

    def __init__(self, engine: LLMEngine, tokenizer: Vocabulary, by_id: dict[str, Sequence], lock: threading.Condition):
        self.engine = engine
        self.tokenizer = tokenizer
        self.by_id = by_id
        self.lock = lock
        self.n_ctx = engine.config.max_model_len
        self.generated_tokens = 0

    def _logprob(self, token: int, data: tuple[float, list[int], list[float]]) -> TokenLogprob:
        return TokenLogprob.of(self.tokenizer.piece, token, *data)

    def advance(self, outputs: StepOutputs) -> None:
        """Hand each token of a step to its request's stream."""
        n_ctx = self.n_ctx
        for seq, token, logprobs, num_tokens, drafted, kept_draft in outputs:
            stream = seq.owner.stream
            if seq.is_finished or stream.finished:  # a token verified after the one that ended the request
                continue
            stream.cached_tokens = seq.num_cached_tokens
            if seq.owner.sampler.matcher is not None and (failed := grammar_failure(seq.owner.sampler)) is not None:
                self._release(seq)  # its own grammar gave up: the end token drawn in its place is not the answer's
                stream.finish("error", error=str(failed), code=failed.code)
                continue
            if drafted:
                stream.verifying(drafted)
            lp = (self._logprob(token, logprobs),) if logprobs is not None else ()
            n_before = len(stream.generated)
            done = stream.push(token, logprobs=lp, context_full=num_tokens >= n_ctx, kept_draft=kept_draft)
            self.generated_tokens += len(stream.generated) - n_before
            if done:
                self._release(seq)

    def finish(self, seq: Sequence, reason: FinishReason, *, error: str | None = None) -> None:
        """End ``seq``'s stream with ``reason`` and free its blocks at once."""
        stream = seq.owner.stream
        if seq.is_finished or stream.finished:
            return
        stream.cached_tokens = seq.num_cached_tokens
        self._release(seq)
        stream.finish(reason, error=error)

    def _release(self, seq: Sequence) -> None:
        self.engine.finish(seq)
        with self.lock:
            self.by_id.pop(seq.owner.stream.request_id, None)


__all__ = ["StreamWriter"]
