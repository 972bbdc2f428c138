"""Speculative decoding in the paged engine: a decoding sequence's draft is computed in the step after its
pending token, verified row by row with its own sampler, and the KV slots, blocks and prefix-cache entries
of the drafted tokens not kept are given back. The output is the plain decoding's, token for token."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.llm_engine import LLMEngine
from engine.backends.paged.sampler import RequestSampler
from engine.backends.paged.scheduler import Scheduler
from engine.backends.paged.sequence import Sequence
from engine.backends.speculative import Drafter, SpeculativeOptions
from engine.types import SamplingParams
from tests.engine.paged.test_batching import VOCAB, engine_for, tiny_model

GREEDY = SamplingParams(temperature=0)


def scheduler(num_blocks: int = 64, **cfg) -> Scheduler:
    return Scheduler(EngineConfig(block_size=4, **cfg), BlockManager(num_blocks, 4))


def decoding(sched: Scheduler, *prompts: list[int]) -> list[Sequence]:
    """Sequences whose prompts are computed and whose first token (7) is pending."""
    seqs = [Sequence(p, GREEDY, block_size=4) for p in prompts]
    for seq in seqs:
        sched.add(seq)
    out = sched.schedule()
    sched.postprocess(out, {seq.seq_id: 7 for seq in seqs})
    assert all(s.num_uncomputed_tokens == 1 for s in seqs)
    return seqs


def test_a_draft_takes_only_the_rows_and_blocks_the_other_decodes_leave():
    sched = scheduler(max_num_batched_tokens=6)
    a, b, c = decoding(sched, [10, 11], [20, 21], [30, 31])
    out = sched.schedule({a.seq_id: [1, 2, 3, 4, 5], c.seq_id: [8, 9]})
    rows = {x.seq.seq_id: (x.num_tokens, x.draft) for x in out.scheduled}
    # a's draft is cut to leave b and c a row each; c's draft gets no row left at all
    assert rows == {a.seq_id: (1, (1, 2, 3)), b.seq_id: (1, ()), c.seq_id: (1, ())}
    assert out.num_batched_tokens == 6 and out.num_draft_tokens == 3

    tight = scheduler(num_blocks=3, max_num_batched_tokens=64)
    d, e = decoding(tight, [1, 2, 3], [4, 5, 6])
    out = tight.schedule({d.seq_id: [1, 2, 3, 4, 5, 6]})  # one block free, which e's next token does not need
    assert [x.draft for x in out.scheduled] == [(1, 2, 3, 4)] + [()] and not out.preempted
    assert len(d.block_table) == 2 and tight.block_manager.num_free_blocks == 0


def test_the_blocks_of_refused_drafted_tokens_go_back_and_are_never_cached():
    sched = scheduler(num_blocks=16, max_num_batched_tokens=64)
    (seq,) = decoding(sched, [1, 2, 3])  # 3 tokens computed, 7 pending: one block
    free = sched.block_manager.num_free_blocks
    out = sched.schedule({seq.seq_id: [8, 9, 10, 11, 12, 13]})  # 7 rows: positions 3-9, three blocks in all
    assert len(seq.block_table) == 3 and sched.block_manager.num_free_blocks == free - 2
    sched.postprocess(out, {seq.seq_id: [8, 9, 40]})  # 8 and 9 kept, 40 sampled where 10 was drafted
    assert seq.token_ids == [1, 2, 3, 7, 8, 9, 40] and seq.num_computed_tokens == 6
    assert len(seq.block_table) == 2 and sched.block_manager.num_free_blocks == free - 1
    cached = [b.token_ids for b in sched.block_manager.blocks if b.token_ids]
    assert cached == [(1, 2, 3, 7)]  # the second block holds 8, 9 and refused rows: not full, not cached
    sched.postprocess(sched.schedule({seq.seq_id: [41, 42]}), {seq.seq_id: [41, 42, 43]})  # all kept
    assert seq.token_ids[-4:] == [40, 41, 42, 43] and seq.num_computed_tokens == 9
    cached = [b.token_ids for b in sched.block_manager.blocks if b.token_ids]
    assert cached == [(1, 2, 3, 7), (8, 9, 40, 41)]


def run(model, specs, *, drafts: list[list[int] | None], **cfg) -> tuple[list[list[int]], LLMEngine]:
    """Every request to its max_tokens on one engine (requests at once), each drafting from its prediction."""
    engine = engine_for(model, **cfg)
    seqs = []
    for (prompt, params), predicted in zip(specs, drafts, strict=True):
        sampler = RequestSampler(params, vocab_size=VOCAB, eos_ids=[], device=torch.device("cpu"))
        drafter = Drafter([*predicted, *prompt], SpeculativeOptions(mode="ngram")) if predicted is not None else None
        seq = Sequence(prompt, params, block_size=4, owner=SimpleNamespace(sampler=sampler, drafter=drafter))
        seqs.append(seq)
        engine.add(seq)
    while engine.has_work:
        outputs = engine.step()
        _check_columns(outputs)
        for seq, token, *_ in outputs:
            if seq.owner.drafter is not None:
                seq.owner.drafter.push(token)  # what the request's stream does with each token
        for s in list(engine.scheduler.running):
            assert len(s.block_table) == -(-s.num_computed_tokens // 4)  # no block past the computed tokens
            if s.num_completion_tokens >= s.params.max_tokens:
                engine.finish(s)
    return [s.completion_token_ids for s in seqs], engine


def _check_columns(outputs) -> None:
    """A step's entries for each sequence: its newest tokens in order, its lengths counting up to its own, the
    drafted count on its first entry only, and every entry but the last a drafted token it kept."""
    by_seq: dict[int, tuple[Sequence, list[tuple]]] = {}
    for seq, token, logprobs, num_tokens, drafted, kept in outputs:
        assert logprobs is None
        by_seq.setdefault(seq.seq_id, (seq, []))[1].append((token, num_tokens, drafted, kept))
    assert len(outputs) == sum(len(entries) for _, entries in by_seq.values())
    for seq, entries in by_seq.values():
        k = len(entries)
        assert [e[0] for e in entries] == seq.token_ids[-k:]
        assert [e[1] for e in entries] == list(range(seq.num_tokens - k + 1, seq.num_tokens + 1))
        assert entries[0][2] >= k - 1 and all(e[2] == 0 for e in entries[1:])
        assert [e[3] for e in entries] == [True] * (k - 1) + [False]


def test_drafted_steps_give_the_plain_tokens_greedy_and_seeded_with_fewer_steps():
    model = tiny_model()  # float64: no near-ties, so any mistake in a drafted row's computation shows
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (13, 6, 21)]
    specs = [
        (prompts[0], SamplingParams(temperature=0, max_tokens=40)),
        (prompts[1], SamplingParams(temperature=0.9, top_k=30, seed=3, repetition_penalty=1.2, max_tokens=33)),
        (prompts[2], SamplingParams(temperature=0, max_tokens=25)),
        # a penalty over the output: a drafted row is sampled with the kept tokens before it in its history
        (prompts[2], SamplingParams(temperature=0, frequency_penalty=0.5, max_tokens=30)),
    ]  # fmt: skip
    plain, plain_engine = run(model, specs, drafts=[None] * 4, max_num_batched_tokens=16)

    def predicted(tokens: list[int], every: int) -> list[int]:  # the answer with every n-th token wrong
        return [(t + 1) % VOCAB if i % every == every - 1 else t for i, t in enumerate(tokens)]

    guesses = [predicted(plain[0], 6), predicted(plain[1], 4), predicted(plain[2], 9), predicted(plain[3], 5)]
    got, engine = run(model, specs, drafts=guesses, max_num_batched_tokens=16)
    assert got == plain
    details = engine.stats().details
    assert details["draft_tokens"] > details["accepted_draft_tokens"] > 20  # some kept, some refused
    assert engine.num_steps < plain_engine.num_steps
    assert engine.block_manager.num_used_blocks == 0
    for block in engine.block_manager.blocks:  # every cached block holds a stretch of a request's real tokens
        if block.token_ids:
            assert any(_holds(prompt + out, block.token_ids) for (prompt, _), out in zip(specs, got, strict=True))


def _holds(tokens: list[int], block: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i : i + 4]) == block for i in range(0, len(tokens), 4))
