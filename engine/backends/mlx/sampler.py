"""Per-request sampling on MLX logits, in llama.cpp's order so both backends mean the same thing.

logit bias -> repetition/presence/frequency penalties -> (greedy argmax) or top-k -> top-p ->
min-p -> temperature -> a draw from the request's own seeded key. Log-probabilities come
from the raw logits, before any of that, as in the llama.cpp backend.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import cast

import mlx.core as mx

from engine.errors import InvalidRequest
from engine.tools.guidance import GrammarMatcher
from engine.tools.thinking_budget import ThinkingBudget
from engine.types import SamplingParams


class TokenSampler:
    """Chooses each next token of one request.

    Built (and validated) on the request's thread; its MLX arrays are made on first use,
    on the thread that runs the model.

    Args:
        params: The request's sampling parameters.
        n_vocab: Rows of the model's logits.
        eog_ids: Tokens that end a generation (masked out when ``ignore_eos``).

    Raises:
        InvalidRequest: ``logit_bias`` names a token the model does not have.
    """

    def __init__(
        self,
        params: SamplingParams,
        n_vocab: int,
        eog_ids: Iterable[int],
        matcher: GrammarMatcher | None = None,
        thinking: ThinkingBudget | None = None,
    ) -> None:
        self.params = params
        self.matcher = matcher  # a grammar the output must follow (engine.tools.guidance)
        self.thinking = thinking  # the thinking budget (engine.tools.thinking_budget)
        self.n_vocab = n_vocab
        eog_ids = list(eog_ids)
        bias = dict(params.logit_bias)
        for tok in bias:
            if not 0 <= tok < n_vocab:
                raise InvalidRequest(
                    f"logit_bias names token {tok}, which this model does not have.", "logit_bias"
                )
        if params.ignore_eos:
            for tok in eog_ids:
                if 0 <= tok < n_vocab:
                    bias[tok] = -math.inf
        self._bias_items = bias
        self._bias: mx.array | None = None
        # min_tokens: every end-of-generation and stop token, banned while the answer is shorter
        held = {*eog_ids, *params.stop_token_ids} if params.min_tokens else ()
        self._held_ends = sorted(t for t in held if 0 <= t < n_vocab)
        # any whole number is a valid seed; MLX keys take 64 bits
        self._seed = params.seed % 2**64 if params.seed is not None else secrets.randbits(64)
        self._key: mx.array | None = None

    def _processed(self, logits: mx.array, prompt: Sequence[int], generated: Sequence[int]) -> mx.array:
        p = self.params
        if self._bias_items:
            if self._bias is None:
                ids = mx.array(list(self._bias_items), dtype=mx.int32)
                self._bias = (
                    mx.zeros((self.n_vocab,), dtype=mx.float32)
                    .at[ids]
                    .add(mx.array(list(self._bias_items.values()), dtype=mx.float32))
                )
            logits = logits + self._bias[: logits.shape[-1]]
        if p.penalized:  # each penalty on the tokens the request's parameters name (as every backend reads them)
            repeated, counted = p.penalty_windows(prompt, generated)
            if p.repetition_penalty != 1.0 and repeated:
                ids = mx.array(sorted(set(repeated)), dtype=mx.int32)
                old = logits[ids]
                new = mx.where(old <= 0, old * p.repetition_penalty, old / p.repetition_penalty)
                logits = logits.at[ids].add(new - old)  # a new array: the raw logits stay as they were
            if (p.presence_penalty or p.frequency_penalty) and counted:
                counts = Counter(counted)
                ids = mx.array(list(counts), dtype=mx.int32)
                times = mx.array(list(counts.values()), dtype=mx.float32)
                logits = logits.at[ids].add(-(times * p.frequency_penalty + p.presence_penalty))
        if self._held_ends and p.holds_end(len(generated)):
            logits = logits.at[mx.array(self._held_ends, dtype=mx.int32)].add(-math.inf)
        return logits

    def _filtered(self, logits: mx.array) -> mx.array:
        p = self.params
        neg_inf = mx.array(-math.inf, dtype=logits.dtype)
        if 0 < p.top_k < logits.shape[-1]:
            kth = mx.topk(logits, p.top_k).min()
            logits = mx.where(logits >= kth, logits, neg_inf)
        if p.top_p < 1.0:
            order = mx.argsort(-logits)
            probs = mx.softmax(logits[order])
            # keep the smallest head of the sorted tokens whose mass reaches top_p (at least one)
            keep_sorted = (mx.cumsum(probs) - probs) < p.top_p
            keep = mx.zeros(logits.shape, dtype=mx.int32).at[order].add(keep_sorted.astype(mx.int32))
            logits = mx.where(keep > 0, logits, neg_inf)
        if p.min_p > 0.0:
            logits = mx.where(logits >= logits.max() + math.log(p.min_p), logits, neg_inf)
        return logits

    def sample(self, logits: mx.array, prompt: Sequence[int], generated: Sequence[int]) -> int:
        """The next token, given this step's logits ``[n_vocab]``, the prompt's tokens and those generated so far."""
        forced = self.thinking.forced() if self.thinking is not None else None
        if forced is not None:  # a spent thinking budget: the closing tag's next token, whatever the logits
            if self.matcher is not None:
                self.matcher.consume(forced)
            self.thinking.feed(forced)  # pyright: ignore[reportOptionalMemberAccess]
            return forced
        logits = self._processed(logits.astype(mx.float32), prompt, generated)
        if self.matcher is not None and self.matcher.active:  # tokens that would leave the grammar are never drawn
            allowed = self.matcher.allowed(strict=self.matcher.strict)[: logits.shape[-1]]
            keep = mx.zeros(logits.shape, dtype=mx.bool_)
            keep[: allowed.shape[0]] = mx.array(allowed)
            logits = mx.where(keep, logits, mx.array(-math.inf, dtype=logits.dtype))
        token = self._draw(logits)
        if self.matcher is not None:
            self.matcher.consume(token)
        if self.thinking is not None:
            self.thinking.feed(token)
        return token

    def _draw(self, logits: mx.array) -> int:
        if self.params.greedy:
            return int(mx.argmax(logits).item())  # pyright: ignore[reportArgumentType]  (item(): any scalar; here an int)
        if self._key is None:
            self._key = mx.random.key(self._seed)
        self._key, draw = mx.random.split(self._key)
        logits = self._filtered(logits)
        drawn = mx.random.categorical(logits * (1.0 / self.params.temperature), key=draw)
        return int(drawn.item())  # pyright: ignore[reportArgumentType]  (item(): any scalar; here an int)

    def logprobs(self, logits: mx.array) -> tuple[mx.array, list[int]]:
        """Log-probabilities of the raw logits and the ids of the ``params.logprobs`` best tokens."""
        lp = logits.astype(mx.float32)
        lp = lp - mx.logsumexp(lp)
        n_top = self.params.logprobs or 0
        if not n_top:
            return lp, []
        top = mx.argpartition(-lp, n_top - 1)[:n_top]
        order = mx.argsort(-lp[top])
        return lp, [int(t) for t in cast(list[int], top[order].tolist())]  # tolist(): list-or-scalar; 1-D here


__all__ = ["TokenSampler"]
