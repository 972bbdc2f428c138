"""Speculative sampling for a draft model above temperature 0: which distribution a request samples from, and
the rule that keeps a drafted token so that the output follows the target model's distribution exactly.

A draft model proposes token ``x`` drawn from its own distribution ``q`` (after the request's temperature and
filters). The target keeps ``x`` with probability ``min(1, p(x) / q(x))``, where ``p`` is its own distribution
at that position; otherwise it draws from ``max(0, p - q)``, normalised. Whatever ``q`` is, the token that comes
out is distributed as ``p`` (Leviathan et al. 2023, Chen et al. 2023): a draft that agrees with the target is
kept nearly always, one that does not costs one step and never biases the text.

These are pure functions over probability vectors, so the rule is tested on its own
(tests/engine/backends/test_speculative_sampling.py): many seeded draws over a small vocabulary slice, compared
with ``p`` by a chi-square test that this rule passes and a biased rule fails.
"""

from __future__ import annotations

import numpy as np

from engine.types import SamplingParams


def plain_sampling(params: SamplingParams, *, grammar: bool) -> bool:
    """Whether a request samples from its model's filtered distribution and nothing else: above temperature 0,
    with no grammar, penalties, logit biases or banned end-of-generation tokens. Only then is the
    distribution :func:`filtered_distribution` computes the one the request's sampler draws from, so that
    speculative sampling can judge a draft against it; every other request keeps the equality rule."""
    return (
        not params.greedy
        and not grammar
        and params.repetition_penalty == 1.0
        and not params.presence_penalty
        and not params.frequency_penalty
        and not params.logit_bias
        and not params.ignore_eos
        and not params.min_tokens
    )


def filtered_distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The probability of each token under the request's sampler: top-k, then top-p and min-p (each on the
    probabilities at temperature 1, in that order, as llama.cpp's sampler chain applies them), then the
    temperature over the tokens left.

    Args:
        logits: The raw logits over the whole vocabulary.
        params: The request's sampling parameters (above temperature 0).

    Returns:
        A float64 vector over the vocabulary that sums to 1, zero outside the tokens the filters keep.
    """
    x = np.asarray(logits, dtype=np.float64)
    n = len(x)
    if 0 < params.top_k < n:
        idx = np.argpartition(-x, params.top_k - 1)[: params.top_k]
    else:
        idx = np.arange(n)
    if params.top_p < 1.0:
        idx = idx[np.argsort(-x[idx], kind="stable")]
        z = x[idx] - x[idx[0]]
        probs = np.exp(z)
        cum = np.cumsum(probs) / probs.sum()
        crossed = np.flatnonzero(cum >= params.top_p)
        keep = int(crossed[0]) + 1 if len(crossed) else len(idx)  # through the token that reaches top_p
        idx = idx[:keep]
    if params.min_p > 0.0:
        top = x[idx].max()
        idx = idx[x[idx] >= top + np.log(params.min_p)]  # p(t) >= min_p * p(best), at temperature 1
    scaled = x[idx] / params.temperature
    w = np.exp(scaled - scaled.max())
    p = np.zeros(n, dtype=np.float64)
    p[idx] = w / w.sum()
    return p


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """A token drawn from the distribution ``p``."""
    cum = np.cumsum(p)
    return int(min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), len(p) - 1))


def accept_or_resample(p: np.ndarray, q: np.ndarray, token: int, rng: np.random.Generator) -> int:
    """The token the output takes where a draft proposed ``token``, drawn from ``q``, and the target's
    distribution is ``p``: ``token`` itself with probability ``min(1, p[token] / q[token])``, else a draw from
    ``max(0, p - q)`` normalised (which is never ``token``). The result is distributed as ``p``.

    Args:
        p: The target's distribution at this position.
        q: The distribution the draft drew ``token`` from.
        token: The drafted token.
        rng: The request's random numbers.
    """
    qx = float(q[token])
    if qx <= 0.0 or rng.random() * qx < float(p[token]):  # u < p/q, without dividing
        return token if qx > 0.0 else sample(p, rng)
    residual = np.maximum(p - q, 0.0)
    residual[token] = 0.0  # zero already (p < q there); rounding must not bring it back
    if residual.sum() <= 0.0:  # p == q to rounding: the draft was as good as a draw from p
        return token
    return sample(residual, rng)


__all__ = ["accept_or_resample", "filtered_distribution", "plain_sampling", "sample"]
