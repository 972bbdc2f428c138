"""Turns each sampling row's logits into a token, vectorised over the batch.

Order: logit bias (and the EOS ban of ``ignore_eos``), repetition/presence/frequency penalties,
greedy pick or temperature, then top-k, top-p and min-p, then a draw. Each request owns a
``torch.Generator`` seeded from its seed, and its random numbers are drawn from it alone, so a
seeded request gives the same tokens whatever else shares the batch. Logprobs are taken from
the model's raw distribution, as the OpenAI API reports them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.errors import InvalidRequest
from engine.tools.guidance import GrammarMatcher
from engine.types import SamplingParams


class RequestSampler:
    """Per-request sampling state: parameters, bias columns and the random generator.

    Raises:
        InvalidRequest: ``logit_bias`` names a token the vocabulary does not have.
    """

    def __init__(
        self,
        params: SamplingParams,
        *,
        vocab_size: int,
        eos_ids: Sequence[int],
        device: torch.device,
        matcher: GrammarMatcher | None = None,
    ) -> None:
        self.params = params
        self.matcher = matcher  # a grammar the output must follow (engine.tools.guidance)
        bias = dict(params.logit_bias)
        for tok in bias:
            if not 0 <= tok < vocab_size:
                raise InvalidRequest(f"logit_bias names token {tok}, which this model does not have.", "logit_bias")
        if params.ignore_eos:
            bias.update({e: -float("inf") for e in eos_ids})
        self.bias = bias
        self.generator: torch.Generator | None = None
        if not params.greedy:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(params.seed if params.seed is not None else random.getrandbits(63))

    @property
    def has_penalties(self) -> bool:
        p = self.params
        return p.repetition_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0


@dataclass(frozen=True, slots=True)
class SampleResult:
    tokens: list[int]
    # per row: None, or (chosen token's logprob, top ids, top logprobs)
    logprobs: list[tuple[float, list[int], list[float]] | None]


def _penalize(logits: torch.Tensor, rows: list[RequestSampler], histories: list[tuple[list[int], int]]) -> None:
    """In place. histories: per row (all token ids, number of prompt tokens)."""
    n, vocab = logits.shape
    dev = logits.device
    width = max(1, max(len(t) for t, _ in histories))
    ids = torch.full((n, width), vocab, dtype=torch.int64)  # vocab = a padding column, dropped below
    out_mask = torch.zeros(n, width)
    for i, (tokens, n_prompt) in enumerate(histories):
        ids[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
        out_mask[i, n_prompt : len(tokens)] = 1.0
    ids, out_mask = ids.to(dev), out_mask.to(dev)
    counts = torch.zeros(n, vocab + 1, device=dev).scatter_add_(1, ids, out_mask)[:, :vocab]  # output-token counts
    seen = torch.zeros(n, vocab + 1, dtype=torch.bool, device=dev).scatter_(1, ids, True)[:, :vocab]  # prompt or output
    rep = torch.tensor([r.params.repetition_penalty for r in rows], device=dev).unsqueeze(1)
    freq = torch.tensor([r.params.frequency_penalty for r in rows], device=dev).unsqueeze(1)
    pres = torch.tensor([r.params.presence_penalty for r in rows], device=dev).unsqueeze(1)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits.copy_(torch.where(seen, penalized, logits))
    logits -= freq * counts + pres * (counts > 0).to(logits.dtype)


def _filter(logits: torch.Tensor, rows: list[RequestSampler]) -> torch.Tensor:
    """Top-k, top-p and min-p: filtered-out logits become -inf."""
    dev, vocab = logits.device, logits.shape[1]
    ks = [r.params.top_k for r in rows]
    ps = [r.params.top_p for r in rows]
    mins = [r.params.min_p for r in rows]
    if any(m > 0 for m in mins):
        probs = logits.softmax(-1)
        floor = torch.tensor(mins, device=dev).unsqueeze(1) * probs.max(-1, keepdim=True).values
        logits = logits.masked_fill(probs < floor, -float("inf"))
    if any(k > 0 for k in ks) or any(p < 1.0 for p in ps):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        k = torch.tensor([k if k > 0 else vocab for k in ks], device=dev).unsqueeze(1)
        ranks = torch.arange(vocab, device=dev).unsqueeze(0)
        sorted_logits = sorted_logits.masked_fill(ranks >= k, -float("inf"))
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the better tokens
        drop = before > torch.tensor(ps, device=dev).unsqueeze(1)
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, -float("inf"))
        logits = torch.full_like(logits, -float("inf")).scatter_(1, order, sorted_logits)
    return logits


def sample(
    logits: torch.Tensor, rows: list[RequestSampler], histories: list[tuple[list[int], int]]
) -> SampleResult:
    """Pick one token per row. logits: [rows, vocab] float32 (not modified)."""
    raw = logits
    n, dev = logits.shape[0], logits.device
    logits = logits.clone()
    cols = [(i, t, b) for i, r in enumerate(rows) for t, b in r.bias.items()]
    if cols:
        r_idx, t_idx, vals = zip(*cols, strict=True)
        logits.index_put_(
            (torch.tensor(r_idx, device=dev), torch.tensor(t_idx, device=dev)),
            torch.tensor(vals, device=dev, dtype=logits.dtype),
            accumulate=True,
        )
    if any(r.has_penalties for r in rows):
        _penalize(logits, rows, histories)
    constrained = [(i, r.matcher) for i, r in enumerate(rows) if r.matcher is not None]
    for i, matcher in constrained:  # tokens that would leave the grammar are never drawn
        allowed = torch.from_numpy(matcher.allowed()[: logits.shape[1]]).to(dev)
        logits[i, : allowed.shape[0]].masked_fill_(~allowed, -float("inf"))
        logits[i, allowed.shape[0] :] = -float("inf")
    greedy = [r.params.greedy for r in rows]
    tokens = logits.argmax(-1)
    if not all(greedy):
        temps = torch.tensor([r.params.temperature or 1.0 for r in rows], device=dev).unsqueeze(1)
        probs = _filter(logits / temps, rows).softmax(-1)
        noise = torch.empty_like(probs)
        for i, r in enumerate(rows):  # each request's own generator: draws do not depend on the batch
            if r.generator is not None:
                noise[i].exponential_(generator=r.generator)
            else:
                noise[i].fill_(1.0)
        drawn = (probs / noise).argmax(-1)  # the exponential race: an exact draw from probs
        tokens = torch.where(torch.tensor(greedy, device=dev), tokens, drawn)
    token_list = tokens.tolist()
    for i, matcher in constrained:
        matcher.consume(token_list[i])
    lps: list[tuple[float, list[int], list[float]] | None] = [None] * n
    want = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
    if want:
        logp = raw[want].log_softmax(-1)
        k = max(rows[i].params.logprobs for i in want)
        top_v, top_i = logp.topk(max(k, 1), dim=-1)
        chosen = logp.gather(1, tokens[want].unsqueeze(1)).squeeze(1).tolist()
        for j, i in enumerate(want):
            kk = rows[i].params.logprobs
            lps[i] = (chosen[j], top_i[j, :kk].tolist(), top_v[j, :kk].tolist())
    return SampleResult(token_list, lps)


__all__ = ["RequestSampler", "SampleResult", "sample"]
