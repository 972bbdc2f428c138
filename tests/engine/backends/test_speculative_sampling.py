"""Speculative sampling for a draft model: the tokens that come out follow the target's distribution whatever the
draft's is (a chi-square test over many seeded draws on an 8-token slice, which biased acceptance rules fail), and
the distribution it judges by is the one llama.cpp's sampler chain draws from for the same settings."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from engine.backends.speculative_sampling import (
    accept_or_resample,
    filtered_distribution,
    plain_sampling,
    sample,
)
from engine.types import SamplingParams

# chi-square's 99.9th percentile for 1..7 degrees of freedom: a right rule fails at a fixed seed once in a thousand
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}
DRAWS = 20_000

P = np.array([0.30, 0.22, 0.16, 0.12, 0.09, 0.06, 0.04, 0.01])  # the target's distribution at a position
Q = np.array([0.05, 0.10, 0.40, 0.05, 0.20, 0.02, 0.08, 0.10])  # a draft that disagrees with it


def chi_square(counts: np.ndarray, p: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of ``counts`` against ``p`` and its degrees of freedom (a token ``p`` never gives
    must never come: that counts as infinite)."""
    n = counts.sum()
    if counts[p == 0].any():
        return float("inf"), 1
    live = p > 0
    expected = n * p[live]
    return float(((counts[live] - expected) ** 2 / expected).sum()), int(live.sum()) - 1


def outcomes(rule, seed: int = 11) -> np.ndarray:
    """Counts of the tokens ``rule(p, q, drafted, rng)`` gives when the draft draws from Q."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(P), dtype=np.int64)
    for _ in range(DRAWS):
        counts[rule(P, Q, sample(Q, rng), rng)] += 1
    return counts


def always_accept(p, q, x, rng):
    return x


def accept_with_p_alone(p, q, x, rng):
    return x if rng.random() < p[x] else sample(np.maximum(p - q, 0), rng)


def resample_from_p(p, q, x, rng):
    return x if rng.random() * q[x] < p[x] else sample(p, rng)


def test_the_rule_gives_the_targets_distribution_and_biased_rules_do_not():
    stat, dof = chi_square(outcomes(accept_or_resample), P)
    assert stat < CHI2_999[dof], f"speculative sampling drifted from p: chi2 {stat:.1f} on {dof} dof"
    for biased in (always_accept, accept_with_p_alone, resample_from_p):
        stat, dof = chi_square(outcomes(biased), P)
        assert stat > 10 * CHI2_999[dof], f"{biased.__name__} passed for p: chi2 {stat:.1f}"


def test_a_draft_that_is_the_target_is_always_kept_and_a_point_mass_draft_is_exact_too():
    rng = np.random.default_rng(3)
    assert all(accept_or_resample(P, P, x, rng) == x for x in (sample(P, rng) for _ in range(500)))
    point = np.zeros(len(P))
    point[2] = 1.0  # a greedy draft: the token it picked, for sure
    counts = np.zeros(len(P), dtype=np.int64)
    for _ in range(DRAWS):
        counts[accept_or_resample(P, point, 2, rng)] += 1
    stat, dof = chi_square(counts, P)
    assert stat < CHI2_999[dof]


def test_the_filtered_distribution_is_the_one_llama_cpps_chain_draws_from():
    llama_cpp = pytest.importorskip("llama_cpp")
    logits = np.array([2.0, 1.6, 1.5, 0.9, 0.4, 0.1, -0.5, -1.5], dtype=np.float32)
    for settings in ({"top_k": 5}, {"top_p": 0.8}, {"min_p": 0.3}, {"top_k": 6, "top_p": 0.9, "min_p": 0.1}, {}):
        params = SamplingParams(temperature=0.7, **settings)
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        samplers = [
            *([llama_cpp.llama_sampler_init_top_k(params.top_k)] if params.top_k else []),
            *([llama_cpp.llama_sampler_init_top_p(params.top_p, 1)] if params.top_p < 1 else []),
            *([llama_cpp.llama_sampler_init_min_p(params.min_p, 1)] if params.min_p else []),
            llama_cpp.llama_sampler_init_temp(params.temperature),
            llama_cpp.llama_sampler_init_dist(1234),
        ]  # in the order SequenceSampler builds its chain
        for sampler in samplers:
            llama_cpp.llama_sampler_chain_add(chain, sampler)
        cells = (llama_cpp.llama_token_data * len(logits))()
        counts = np.zeros(len(logits), dtype=np.int64)
        try:
            for _ in range(DRAWS // 2):
                for i, x in enumerate(logits):
                    cells[i].id, cells[i].logit, cells[i].p = i, float(x), 0.0
                cur = llama_cpp.llama_token_data_array(cells, len(logits), -1, False)
                llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
                counts[cur.data[cur.selected].id] += 1
        finally:
            llama_cpp.llama_sampler_free(chain)
        p = filtered_distribution(logits, params)
        assert abs(p.sum() - 1) < 1e-9
        stat, dof = chi_square(counts, p)
        assert stat < CHI2_999[max(dof, 1)], f"{settings}: chi2 {stat:.1f} on {dof} dof"


def test_only_plain_sampling_is_judged_by_distributions():
    assert plain_sampling(SamplingParams(temperature=0.8, top_p=0.9), grammar=False)
    assert not plain_sampling(SamplingParams(temperature=0), grammar=False)  # greedy: the equality rule
    assert not plain_sampling(SamplingParams(temperature=0.8), grammar=True)
    assert not plain_sampling(SamplingParams(temperature=0.8, repetition_penalty=1.1), grammar=False)
    assert not plain_sampling(SamplingParams(temperature=0.8, logit_bias=((5, 2.0),)), grammar=False)
