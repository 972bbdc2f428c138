"""Speculative decoding in the paged engine: drafts into the step, and their verification.

Each decoding sequence whose request drafts (``seq.owner.drafter``, a :class:`~engine.backends.speculative.Drafter`
from the shared request runtime) proposes tokens that may follow its pending one. The scheduler puts them in the
step after the pending token, a chunk of rows over the sequence's KV blocks, so the model gives logits at each
of them. They are then sampled in order, each row with the request's own sampler (its seed's draw count, its
grammar and its penalties over the tokens before it advance as they would one step at a time), and a drafted
token is kept while it is the token sampled at the row before it. The first difference ends the run: its
sampled token is the step's last, and the scheduler gives back the KV slots and blocks of the drafted tokens
that were not kept.

Every kept token is the sampler's own draw at its position, so the output is the plain decoding's token for
token; only a batch's rounding differs from a lone row's, which can flip a greedy pick at a near-tie.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from engine.backends.paged.sampler import sample
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence import Sequence

# Drafted rows fill a step up to this many rows in all (decodes and drafts). On the CPU a step reads every
# weight once whatever its rows, so a few more rows cost little; past this the step is bound by compute.
DRAFT_ROWS_CPU = 16
DRAFT_ROWS_GPU = 64


@dataclass(frozen=True, slots=True)
class Verified:
    """What one sampling sequence got from a step: its tokens (the drafted ones it kept, then the token sampled
    after them), their logprobs when asked for, and how many tokens it had drafted."""

    seq: Sequence
    tokens: list[int]
    logprobs: list[tuple[float, list[int], list[float]] | None]
    drafted: int

    @property
    def kept(self) -> int:
        return len(self.tokens) - 1


def propose_drafts(running: Iterable[Sequence], *, rows: int, max_model_len: int, row_cost: float) -> dict[int, list[int]]:
    """The drafts of the running sequences that decode this step, keyed by seq_id: within ``rows`` rows of the
    step in all, each sequence's context and its answer's length.

    Args:
        running: The running sequences (those mid-prefill draft nothing).
        rows: Most rows of the step, decodes and drafted tokens together.
        max_model_len: The longest sequence.
        row_cost: What one more row adds to a one-row step (its share), which decides how long a draft pays.
    """
    decoding = [s for s in running if s.num_uncomputed_tokens == 1]
    room = rows - len(decoding)
    drafts: dict[int, list[int]] = {}
    for seq in decoding:
        drafter = seq.owner.drafter
        if drafter is None or room <= 0:
            continue
        # the pending token, the draft and the token sampled after it all fit the context and the answer
        limit = min(room, max_model_len - seq.num_tokens - 1)
        if seq.params.max_tokens is not None:
            limit = min(limit, seq.params.max_tokens - seq.num_completion_tokens - 1)
        draft = drafter.propose(limit, row_cost) if limit > 0 else []
        if draft:
            drafts[seq.seq_id] = draft
            room -= len(draft)
    return drafts


def verify(sampled: list[ScheduledSeq], logits: torch.Tensor) -> list[Verified]:
    """Sample each sequence's rows in order and keep its drafted tokens while they are the sampler's own.

    Args:
        sampled: The step's sampling sequences, in row order.
        logits: [rows, vocab]: each sequence's last token's row, then one per drafted token.
    """
    firsts: list[int] = []
    row = 0
    for item in sampled:
        firsts.append(row)
        row += 1 + len(item.draft)
    got: list[list[int]] = [[] for _ in sampled]
    lps: list[list] = [[] for _ in sampled]
    active = list(range(len(sampled)))
    j = 0
    while active:
        seqs = [sampled[i].seq for i in active]
        rows = logits if row == len(active) else logits.index_select(0, torch.tensor([firsts[i] + j for i in active],
                                                                                      device=logits.device))
        histories = [(s.token_ids + got[i] if got[i] else s.token_ids, s.num_prompt_tokens) for i, s in zip(active, seqs, strict=True)]
        result = sample(rows, [s.owner.sampler for s in seqs], histories)
        still = []
        for i, s, token, lp in zip(active, seqs, result.tokens, result.logprobs, strict=True):
            got[i].append(token)
            lps[i].append(lp)
            draft = sampled[i].draft
            if j < len(draft) and token == draft[j] and token not in s.owner.sampler.end_ids:
                still.append(i)
        active = still
        j += 1
    out = []
    for item, tokens, lp in zip(sampled, got, lps, strict=True):
        drafter = item.seq.owner.drafter if item.draft else None
        if drafter is not None:
            drafter.record(len(item.draft), len(tokens) - 1)
        out.append(Verified(item.seq, tokens, lp, len(item.draft)))
    return out


__all__ = ["DRAFT_ROWS_CPU", "DRAFT_ROWS_GPU", "Verified", "propose_drafts", "verify"]
