"""Turns engine step outputs into each request's stream of chunks (engine thread only)."""

from __future__ import annotations

import threading
import time

from engine.backends.paged.llm_engine import LLMEngine, StepOutput
from engine.backends.paged.sequence import Sequence
from engine.gguf.vocab import Vocabulary
from engine.types import GenerationChunk, TokenLogprob


class StreamWriter:
    """Decides when a sequence stops, decodes its text and writes its chunks.

    Args:
        engine: The engine whose sequences these are (its ``finish`` frees their blocks).
        tokenizer: For byte pieces of tokens.
        by_id: The backend's request-id -> sequence map, guarded by ``lock``.
        lock: The backend's condition lock.
    """

    def __init__(self, engine: LLMEngine, tokenizer: Vocabulary, by_id: dict[str, Sequence], lock: threading.Condition):
        self.engine = engine
        self.tokenizer = tokenizer
        self.by_id = by_id
        self.lock = lock
        self.n_ctx = engine.config.max_model_len

    def _logprob(self, token: int, data: tuple[float, list[int], list[float]]) -> TokenLogprob:
        chosen, ids, values = data
        piece = self.tokenizer.piece
        top = tuple((piece(t).decode("utf-8", errors="replace"), v, tuple(piece(t))) for t, v in zip(ids, values, strict=True))
        p = piece(token)
        return TokenLogprob(token=p.decode("utf-8", errors="replace"), token_id=token, logprob=chosen, bytes=tuple(p), top=top)

    def advance(self, out: StepOutput) -> None:
        seq, token = out.seq, out.token
        state, params = seq.owner, seq.params
        if state.t_first is None:
            state.t_first = time.perf_counter()
        lp = (self._logprob(token, out.logprobs),) if out.logprobs is not None else ()
        if (token in self.tokenizer.eog_ids and not params.ignore_eos) or token in params.stop_token_ids:
            self.finish(seq, "stop", counted=seq.num_completion_tokens - 1)
            return
        text = state.decoder.feed(self.tokenizer.piece(token))
        hit = False
        if state.stops is not None:
            text, hit = state.stops.feed(text)
        state.out.put(GenerationChunk(text=text, token_ids=(token,), logprobs=lp))
        if hit:
            self.finish(seq, "stop")
        elif params.max_tokens is not None and seq.num_completion_tokens >= params.max_tokens:
            self.finish(seq, "length")
        elif seq.num_tokens >= self.n_ctx:
            self.finish(seq, "length")

    def finish(self, seq: Sequence, reason: str, *, error: str | None = None, counted: int | None = None) -> None:
        """End ``seq``'s stream with ``reason`` and free its blocks at once."""
        if seq.is_finished:
            return
        state = seq.owner
        tail = ""
        if reason in ("stop", "length") and error is None:
            tail = state.decoder.flush()
            if state.stops is not None:
                text, hit = state.stops.feed(tail)
                tail = text if hit else text + state.stops.flush()
        self.engine.finish(seq)
        with self.lock:
            self.by_id.pop(state.request.request_id, None)
        end = time.perf_counter()
        n_gen = seq.num_completion_tokens if counted is None else counted
        tps = None
        if state.t_first is not None and n_gen > 1 and end > state.t_first:
            tps = (n_gen - 1) / (end - state.t_first)
        state.out.put(
            GenerationChunk(
                text=tail,
                finish_reason=reason,
                prompt_tokens=seq.num_prompt_tokens,
                completion_tokens=n_gen,
                cached_tokens=seq.num_cached_tokens,
                time_to_first_token=(state.t_first - state.t_submit) if state.t_first is not None else None,
                tokens_per_second=tps,
                error=error,
                stop_sequence=state.stops.matched if state.stops is not None else None,
            )
        )


__all__ = ["StreamWriter"]
