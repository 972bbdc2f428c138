"""Turns each sampling row's logits into a token, vectorised over the batch.

Order: logit bias (and the EOS ban of ``ignore_eos``), repetition/presence/frequency penalties,
greedy pick or temperature, then top-k, top-p and min-p, then a draw. The draw is an exponential
race whose noise is a hash of (the request's seed, its draw count, the token), computed for the
whole batch at once (one Triton launch on CUDA; on a CPU a block of rows at a time, the same numbers), so a
seeded request gives the same tokens whatever else shares the batch. Logprobs are taken from the model's raw
distribution, as the OpenAI API reports them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.errors import InvalidRequest
from engine.tools.guidance import GrammarMatcher
from engine.tools.thinking_budget import ThinkingBudget, thinking_budget_for
from engine.types import SamplingParams


class RequestSampler:
    """Per-request sampling state: parameters, bias columns, the seed and the number of draws made.

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
        thinking: ThinkingBudget | None = None,
    ) -> None:
        self.params = params
        self.matcher = matcher  # a grammar the output must follow (engine.tools.guidance)
        self.thinking = thinking  # the thinking budget (engine.tools.thinking_budget): its rows sample one by one
        bias = dict(params.logit_bias)
        for tok in bias:
            if not 0 <= tok < vocab_size:
                raise InvalidRequest(f"logit_bias names token {tok}, which this model does not have.", "logit_bias")
        self.bias = bias
        # ignore_eos: the end-of-generation tokens are never drawn (a column of the batched path, see ban_ends)
        self.banned = tuple(sorted({e for e in eos_ids if 0 <= e < vocab_size})) if params.ignore_eos else ()
        self.seed = params.seed if params.seed is not None else random.getrandbits(63)
        self.draws = 0  # the noise of each draw is a hash of (seed, draws, token)
        # the tokens that end the request: a drafted token after one of them is never verified
        self.end_ids = frozenset(params.stop_token_ids) | frozenset(() if params.ignore_eos else eos_ids)
        # min_tokens: every end-of-generation and stop token, banned while the answer is shorter
        self.held_ends = tuple(sorted(t for t in {*eos_ids, *params.stop_token_ids} if 0 <= t < vocab_size)) if params.min_tokens else ()

    @property
    def has_penalties(self) -> bool:
        return self.params.penalized


def thinking_for(rendered: Any, params: SamplingParams, tokenizer: Any) -> ThinkingBudget | None:
    """A chat request's thinking budget on this engine's tokenizer (None where it asked for none)."""
    return thinking_budget_for(rendered, params.thinking_budget, lambda text: tokenizer.encode(text, parse_special=True),
                               tokenizer.piece)  # fmt: skip


_MASK32 = 0xFFFFFFFF

#: The least noise: the top hash (``h >> 8`` all ones) rounds ``u`` to 1 in float32, and ``-log(1)`` is -0.0, which
#: would make a token of probability 0 a NaN that argmax takes, and one above 0 a loser; floored, the first never
#: wins and the second does (the smallest noise), in torch and in the kernel alike.
NOISE_FLOOR = float(torch.finfo(torch.float32).tiny)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors holding values below 2**32 (no product reaches 2**63)."""
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _MASK32
    return x ^ (x >> 16)


def race_noise(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """Exponential noise [rows, vocab] from keys [rows, 3] (seed high, seed low, draw count), as the kernel makes it."""
    hi, lo, count = keys[:, 0:1], keys[:, 1:2], keys[:, 2:3]
    s = _mix32(_mix32(_mix32(hi) ^ lo) ^ count)
    cols = torch.arange(vocab, device=keys.device, dtype=torch.int64)[None, :]
    h = _mix32(_mix32((s + cols) & _MASK32) ^ s)
    u = ((h >> 8).float() + 0.5) * (1.0 / 16777216.0)
    return (-torch.log(u)).clamp_min_(NOISE_FLOOR)


#: Rows of the CPU's race computed at once: their noise (int32 and float32, [rows, vocab]) stays in the cache
#: while the hash's dozen passes run over it.
RACE_BLOCK_ROWS = 16

_HASH = 0x45D9F3B


def _mix32_bits_(x: torch.Tensor, shifted: torch.Tensor) -> torch.Tensor:
    """:func:`_mix32` in place on int32 tensors holding the hash's 32 bits (products wrap as the mask would cut
    them; a right shift is arithmetic on int32, so its sign bits are masked off). ``shifted``: scratch."""
    for last in (False, False, True):
        torch.bitwise_right_shift(x, 16, out=shifted)
        x.bitwise_xor_(shifted.bitwise_and_(0xFFFF))
        if not last:
            x.mul_(_HASH)
    return x


def _race_cpu(probs: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """:func:`race_noise`'s race with the same numbers, a block of rows at a time in int32: whole-batch int64
    passes take ten times as long on a CPU (most of a sampled decode step at 256 rows)."""
    rows, vocab = probs.shape
    out = torch.empty(rows, dtype=torch.int64)
    if not rows:
        return out
    hi, lo, count = keys[:, 0:1], keys[:, 1:2], keys[:, 2:3]
    seeds = _mix32(_mix32(_mix32(hi) ^ lo) ^ count)  # [rows, 1], below 2**32
    seeds = torch.where(seeds >= 1 << 31, seeds - (1 << 32), seeds).to(torch.int32)  # the same 32 bits
    cols = torch.arange(vocab, dtype=torch.int32)[None, :]
    block = min(RACE_BLOCK_ROWS, rows)
    bits, shifted = torch.empty(block, vocab, dtype=torch.int32), torch.empty(block, vocab, dtype=torch.int32)
    noise = torch.empty(block, vocab, dtype=torch.float32)
    for start in range(0, rows, block):
        n = min(block, rows - start)
        s, h, sh, e = seeds[start : start + n], bits[:n], shifted[:n], noise[:n]
        _mix32_bits_(_mix32_bits_(torch.add(cols, s, out=h), sh).bitwise_xor_(s), sh)  # (s + col) wraps as & MASK
        h.bitwise_right_shift_(8).bitwise_and_(0xFFFFFF)
        e.copy_(h).add_(0.5).mul_(1.0 / 16777216.0).log_().neg_().clamp_min_(NOISE_FLOOR)  # race_noise's operations
        out[start : start + n] = torch.div(probs[start : start + n], e, out=e).argmax(-1)
    return out


def _race(probs: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """argmax(probs / noise) per row: one Triton launch on CUDA, the same numbers in torch elsewhere."""
    if probs.is_cuda:
        try:
            from engine.backends.paged.kernels.sampling import race
        except ImportError:
            pass
        else:
            return race(probs.contiguous(), keys)
    if probs.device.type == "cpu" and probs.dtype in (torch.float32, torch.bfloat16, torch.float16):
        return _race_cpu(probs.float(), keys)  # the reference divides these in float32 too
    return (probs / race_noise(keys, probs.shape[1])).argmax(-1)


@dataclass(frozen=True, slots=True)
class SampleResult:
    tokens: list[int]
    # per row: None, or (chosen token's logprob, top ids, top logprobs)
    logprobs: list[tuple[float, list[int], list[float]] | None]


def _penalize(logits: torch.Tensor, rows: list[RequestSampler], histories: list[tuple[list[int], int]]) -> None:
    """In place. histories: per row (all token ids, number of prompt tokens); each row's penalties read the tokens
    its parameters name (SamplingParams.penalty_windows)."""
    n, vocab = logits.shape
    dev = logits.device
    windows = [r.params.penalty_windows(t[:n_prompt], t[n_prompt:]) if r.has_penalties else ([], [])
               for r, (t, n_prompt) in zip(rows, histories, strict=True)]  # fmt: skip
    width = max(1, max(max(len(a), len(b)) for a, b in windows))
    seen_ids = torch.full((n, width), vocab, dtype=torch.int64)  # vocab = a padding column, dropped below
    count_ids = torch.full((n, width), vocab, dtype=torch.int64)
    for i, (repeated, counted) in enumerate(windows):
        seen_ids[i, : len(repeated)] = torch.tensor(repeated, dtype=torch.int64)
        count_ids[i, : len(counted)] = torch.tensor(counted, dtype=torch.int64)
    seen_ids, count_ids = seen_ids.to(dev), count_ids.to(dev)
    counts = torch.zeros(n, vocab + 1, device=dev).scatter_add_(1, count_ids, torch.ones(n, width, device=dev))[:, :vocab]
    seen = torch.zeros(n, vocab + 1, dtype=torch.bool, device=dev).scatter_(1, seen_ids, True)[:, :vocab]
    rep = torch.tensor([r.params.repetition_penalty for r in rows], device=dev).unsqueeze(1)
    freq = torch.tensor([r.params.frequency_penalty for r in rows], device=dev).unsqueeze(1)
    pres = torch.tensor([r.params.presence_penalty for r in rows], device=dev).unsqueeze(1)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits.copy_(torch.where(seen, penalized, logits))
    logits -= freq * counts + pres * (counts > 0).to(logits.dtype)


def _filter(logits: torch.Tensor, rows: list[RequestSampler]) -> torch.Tensor:
    """Top-k, top-p and min-p: filtered-out logits become -inf."""
    dev = logits.device
    ks = [r.params.top_k for r in rows]
    ps = [r.params.top_p for r in rows]
    mins = [r.params.min_p for r in rows]
    return filter_logits(
        logits, torch.tensor(ks, device=dev), torch.tensor(ps, device=dev), torch.tensor(mins, device=dev),
        top=any(k > 0 for k in ks) or any(p < 1.0 for p in ps), floor=any(m > 0 for m in mins),
    )  # fmt: skip


def filter_logits(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor, *, top: bool, floor: bool
) -> torch.Tensor:
    """Top-k, top-p and min-p from per-row tensors [rows] (top_k 0: none); ``top`` and ``floor`` say whether
    any row asks for top-k/top-p and for min-p, so a batch without them skips the sort."""
    vocab = logits.shape[1]
    if floor:
        probs = logits.softmax(-1)
        cut = min_p.to(probs.dtype).unsqueeze(1) * probs.max(-1, keepdim=True).values
        logits = logits.masked_fill(probs < cut, -float("inf"))
    if top:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        k = torch.where(top_k > 0, top_k, vocab).unsqueeze(1)
        ranks = torch.arange(vocab, device=logits.device).unsqueeze(0)
        sorted_logits = sorted_logits.masked_fill(ranks >= k, -float("inf"))
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the better tokens
        drop = before > top_p.to(probs.dtype).unsqueeze(1)
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, -float("inf"))
        logits = torch.full_like(logits, -float("inf")).scatter_(1, order, sorted_logits)
    return logits


def ban_ends(logits: torch.Tensor, ban: torch.Tensor, end_ids: torch.Tensor) -> torch.Tensor:
    """In place: the end-of-generation columns ``end_ids`` [k] of the rows whose ``ban`` [rows] is nonzero
    (ignore_eos) become -inf. No host sync: a CUDA graph can hold it."""
    ends = logits.index_select(1, end_ids).masked_fill_(ban.unsqueeze(1) != 0, -float("inf"))
    return logits.index_copy_(1, end_ids, ends)


@dataclass(frozen=True, slots=True)
class SamplingBatch:
    """A batch's sampling parameters as tensors [rows] (from persistent per-sequence rows), for rows with no
    bias, penalties, grammar or logprobs. ``all_greedy``, ``top`` and ``floor`` are known on the host.
    ``ban_eos`` (int32, nonzero: ignore_eos) and the model's ``end_ids`` come together, or neither does."""

    greedy: torch.Tensor  # int32, nonzero: greedy
    temperature: torch.Tensor  # float32, 1 on greedy rows
    top_k: torch.Tensor | None  # int32, 0: none (None when no row filters)
    top_p: torch.Tensor | None  # float32
    min_p: torch.Tensor | None  # float32
    seed_hi: torch.Tensor  # int32 bit patterns of the seed's halves and of the draw count
    seed_lo: torch.Tensor
    draws: torch.Tensor
    all_greedy: bool
    top: bool = False
    floor: bool = False
    ban_eos: torch.Tensor | None = None
    end_ids: torch.Tensor | None = None


def sample_batched(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """Tokens [rows] (int64, on the device): greedy rows take the argmax, the others an exact draw from their
    tempered, filtered distribution. No host sync and no per-row work: a CUDA graph can hold it. ``logits`` is
    changed in place where rows ban the end of generation."""
    if batch.ban_eos is not None and batch.end_ids is not None:
        ban_ends(logits, batch.ban_eos, batch.end_ids)
    tokens = logits.argmax(-1)
    if batch.all_greedy:
        return tokens
    x = logits / batch.temperature.unsqueeze(1)
    if batch.top or batch.floor:
        if batch.top_k is None or batch.top_p is None or batch.min_p is None:
            raise ValueError("a filtered sampling batch came without its top-k, top-p and min-p")
        x = filter_logits(x, batch.top_k, batch.top_p, batch.min_p, top=batch.top, floor=batch.floor)
    keys = torch.stack((batch.seed_hi, batch.seed_lo, batch.draws), 1).long() & _MASK32
    drawn = _race(x.softmax(-1), keys)
    return torch.where(batch.greedy != 0, tokens, drawn)


def sample(
    logits: torch.Tensor, rows: list[RequestSampler], histories: list[tuple[list[int], int]]
) -> SampleResult:
    """Pick one token per row. logits: [rows, vocab] float32 (not modified)."""
    raw = logits
    n, dev = logits.shape[0], logits.device
    logits = logits.clone()
    cols = [(i, t, b) for i, r in enumerate(rows) for t, b in r.bias.items()]
    cols += [(i, t, -float("inf")) for i, r in enumerate(rows) for t in r.banned]
    cols += [(i, t, -float("inf")) for i, (r, (ids, n_prompt)) in enumerate(zip(rows, histories, strict=True))
             if r.held_ends and r.params.holds_end(len(ids) - n_prompt) for t in r.held_ends]  # fmt: skip
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
        if not matcher.active:  # waiting for a tool call to open: free until then
            continue
        allowed = torch.from_numpy(matcher.allowed()[: logits.shape[1]]).to(dev)
        logits[i, : allowed.shape[0]].masked_fill_(~allowed, -float("inf"))
        logits[i, allowed.shape[0] :] = -float("inf")
    for i, r in enumerate(rows):  # a spent thinking budget: the closing tag's next token, whatever the logits
        if r.thinking is not None and (forced := r.thinking.forced()) is not None:
            kept = logits[i, forced].clone()
            logits[i].fill_(-float("inf"))
            logits[i, forced] = kept if bool(torch.isfinite(kept)) else 0.0
    greedy = [r.params.greedy for r in rows]
    tokens = logits.argmax(-1)
    if not all(greedy):
        temps = torch.tensor([r.params.temperature or 1.0 for r in rows], device=dev).unsqueeze(1)
        probs = _filter(logits / temps, rows).softmax(-1)
        keys = torch.tensor([[(r.seed >> 32) & _MASK32, r.seed & _MASK32, r.draws & _MASK32] for r in rows],
                            dtype=torch.int64, device=dev)  # fmt: skip
        drawn = _race(probs, keys)  # the exponential race: an exact draw from probs
        for r in rows:
            r.draws += not r.params.greedy
        tokens = torch.where(torch.tensor(greedy, device=dev), tokens, drawn)
    token_list = tokens.tolist()
    for i, matcher in constrained:
        matcher.consume(token_list[i])
    for r, token in zip(rows, token_list, strict=True):
        if r.thinking is not None:
            r.thinking.feed(token)
    lps: list[tuple[float, list[int], list[float]] | None] = [None] * n
    want = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
    if want:
        logp = raw[want].log_softmax(-1)
        k = max(rows[i].params.logprobs or 0 for i in want)
        top_v, top_i = logp.topk(max(k, 1), dim=-1)
        chosen = logp.gather(1, tokens[want].unsqueeze(1)).squeeze(1).tolist()
        for j, i in enumerate(want):
            kk = rows[i].params.logprobs
            lps[i] = (chosen[j], top_i[j, :kk].tolist(), top_v[j, :kk].tolist())
    return SampleResult(token_list, lps)


__all__ = ["RequestSampler", "SampleResult", "SamplingBatch", "ban_ends", "filter_logits", "sample", "sample_batched", "thinking_for"]
