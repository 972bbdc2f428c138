"""The scheduler on its own: budgets, chunked prefill, decode priority, preemption by recompute. No torch."""

from __future__ import annotations

from engine.backends.paged import scheduler as scheduler_module
from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.scheduler import Scheduler
from engine.backends.paged.sequence import Sequence, SequenceStatus
from engine.types import SamplingParams

GREEDY = SamplingParams(temperature=0)


def make(num_blocks=64, **cfg) -> Scheduler:
    config = EngineConfig(block_size=4, **cfg)
    return Scheduler(config, BlockManager(num_blocks, 4, enable_prefix_caching=config.enable_prefix_caching))


def step(sched: Scheduler, token: int = 7):
    out = sched.schedule()
    sched.postprocess(out, {s.seq.seq_id: token for s in out.scheduled if s.samples})
    return out


def test_a_long_prompt_is_chunked_under_the_token_budget():
    sched = make(max_num_batched_tokens=8)
    s = Sequence(range(20), GREEDY, block_size=4)
    sched.add(s)
    sizes = []
    while s.num_completion_tokens == 0:
        out = step(sched)
        sizes.append(out.num_batched_tokens)
        assert out.num_batched_tokens <= 8
    assert sizes == [8, 8, 4]
    assert s.num_computed_tokens == 20 and s.num_tokens == 21


def test_decodes_are_scheduled_before_prefill_chunks_and_share_the_step():
    sched = make(max_num_batched_tokens=10)
    a = Sequence(range(3), GREEDY, block_size=4)
    sched.add(a)
    step(sched)  # a is prefilled and has its first token
    b = Sequence(range(30), GREEDY, block_size=4)
    sched.add(b)
    out = step(sched)
    assert [(x.seq is a, x.num_tokens) for x in out.scheduled] == [(True, 1), (False, 9)]
    out = step(sched)
    assert out.scheduled[0].seq is a and out.scheduled[0].num_tokens == 1


def test_requests_join_and_leave_between_steps():
    sched = make()
    a = Sequence(range(5), GREEDY, block_size=4)
    sched.add(a)
    step(sched)
    b = Sequence(range(6), GREEDY, block_size=4)
    sched.add(b)
    out = step(sched)
    assert {x.seq.seq_id for x in out.scheduled} == {a.seq_id, b.seq_id}
    sched.finish(a)
    assert a.status is SequenceStatus.FINISHED and a.block_table == []
    out = step(sched)
    assert [x.seq for x in out.scheduled] == [b]


def test_max_num_seqs_limits_admission():
    sched = make(max_num_seqs=2)
    seqs = [Sequence(range(3), GREEDY, block_size=4) for _ in range(3)]
    for s in seqs:
        sched.add(s)
    out = step(sched)
    assert len(out.scheduled) == 2 and len(sched.waiting) == 1


def test_running_out_of_blocks_preempts_the_youngest_and_it_recomputes_later():
    sched = make(num_blocks=4, max_num_batched_tokens=64)
    old = Sequence(range(7), GREEDY, block_size=4)
    young = Sequence(range(100, 107), GREEDY, block_size=4)
    sched.add(old)
    sched.add(young)
    step(sched)  # both prefilled: 2 blocks each, all 4 used; each now has 8 tokens
    step(sched)  # each decodes its 8th token into its 2nd block (full now)
    out = step(sched)  # the 9th token needs a 3rd block: young is preempted
    assert out.preempted == (young,)
    assert young.status is SequenceStatus.WAITING and young.num_computed_tokens == 0
    assert young.block_table == [] and young.num_preemptions == 1
    assert [x.seq for x in out.scheduled] == [old]
    tokens_before = list(young.token_ids)
    sched.finish(old)
    out = step(sched)
    assert out.scheduled[0].seq is young
    # recomputed from its tokens; its first full block was still in the prefix cache
    assert young.num_cached_tokens == 4 and out.scheduled[0].num_tokens == len(tokens_before) - 4
    assert young.token_ids[: len(tokens_before)] == tokens_before  # recomputed, nothing lost


def test_prefix_hit_skips_the_cached_tokens():
    sched = make(max_num_batched_tokens=64)
    a = Sequence(range(13), GREEDY, block_size=4)
    sched.add(a)
    step(sched)
    sched.finish(a)
    b = Sequence([*range(12), 99, 98], GREEDY, block_size=4)
    sched.add(b)
    out = step(sched)
    assert b.num_cached_tokens == 12
    assert out.scheduled[0].num_tokens == 2


def test_a_cancelled_waiting_request_leaves_the_queue():
    sched = make()
    s = Sequence(range(3), GREEDY, block_size=4)
    sched.add(s)
    sched.finish(s)
    assert not sched.has_work and s.is_finished


def test_a_burst_starts_shortest_prompt_first_after_earlier_arrivals_and_every_first_token_comes_in_bounded_steps():
    budget = 32
    sched = make(num_blocks=256, max_num_batched_tokens=budget, max_num_seqs=16)
    early = Sequence(range(50), GREEDY, block_size=4)
    sched.add(early)
    step(sched)  # early has taken 32 of its 50 tokens
    lengths = [60, 5, 30, 9, 17, 3, 44, 9]
    burst = [Sequence(range(n), GREEDY, block_size=4) for n in lengths]
    for s in burst:
        sched.add(s)
    first_token_step: dict[int, int] = {}
    decoding_before: set[int] = set()
    for i in range(1, 40):
        out = step(sched)
        assert out.num_batched_tokens <= budget
        scheduled = {x.seq.seq_id: x for x in out.scheduled}
        for sid in decoding_before:  # a sequence that decodes is never left out of a step
            assert scheduled[sid].num_tokens == 1
        decoding_before = {s.seq_id for s in sched.running if s.num_completion_tokens > 0}
        for s in [early, *burst]:
            if s.num_completion_tokens and s.seq_id not in first_token_step:
                first_token_step[s.seq_id] = i
        if len(first_token_step) == len(burst) + 1:
            break
    assert first_token_step[early.seq_id] == 1  # the earlier arrival finishes its prompt first
    by_length = sorted(burst, key=lambda s: s.num_prompt_tokens)
    steps = [first_token_step[s.seq_id] for s in by_length]
    assert steps == sorted(steps) and steps[0] < steps[-1]  # shortest first: a shorter prompt never starts later
    # every prompt token, and one decode per started sequence each step, fits the budget: no step is wasted
    total = 50 - 32 + sum(lengths)
    assert max(first_token_step.values()) <= -(-(total + len(burst) * len(burst)) // budget) + 1


def first_tokens(sched: Scheduler, seqs: list[Sequence], arrivals: dict[int, list[Sequence]], steps: int) -> dict[int, int]:
    """The step at which each of ``seqs`` got its first token, with ``arrivals[i]`` added before step i."""
    first: dict[int, int] = {}
    for i in range(1, steps + 1):
        for s in arrivals.get(i, []):
            sched.add(s)
        step(sched)
        for s in seqs:
            if s.num_completion_tokens and s.seq_id not in first:
                first[s.seq_id] = i
    return first


def test_prompts_that_arrive_over_several_steps_are_read_shortest_first_across_their_arrivals():
    sched = make(num_blocks=256, max_num_batched_tokens=16, max_num_seqs=16)
    long_a, long_b = Sequence(range(30), GREEDY, block_size=4), Sequence(range(40), GREEDY, block_size=4)
    short = [Sequence(range(n), GREEDY, block_size=4) for n in (4, 6, 5)]
    first = first_tokens(sched, [long_a, long_b, *short], {1: [long_a, long_b], 2: short[:2], 3: short[2:]}, 30)
    assert len(first) == 5
    # long_a started in step 1 and finishes its prompt first; the later, shorter arrivals go before long_b
    assert first[long_a.seq_id] < first[long_b.seq_id]
    assert max(first[s.seq_id] for s in short) < first[long_b.seq_id]


def test_a_prompt_that_waited_long_enough_goes_before_shorter_later_ones(monkeypatch):
    monkeypatch.setattr(scheduler_module, "MAX_WAIT_STEPS", 4)
    sched = make(num_blocks=512, max_num_batched_tokens=8, max_num_seqs=64)
    long = Sequence(range(5000, 5024), GREEDY, block_size=4)
    shorts = [Sequence(range(100 * i, 100 * i + 8), GREEDY, block_size=4) for i in range(40)]
    sched.add(shorts[0])
    sched.add(long)
    long_first = None
    for i in range(1, 60):
        if i < len(shorts):
            sched.add(shorts[i])  # a short prompt every step, each filling a step's budget
        step(sched)
        for s in shorts:
            if s.num_completion_tokens and not s.is_finished:
                sched.finish(s)  # answered: out of the way
        if long.num_completion_tokens:
            long_first = i
            break
    # without the bound every step's short prompt goes first and the long one waits for all 40
    assert long_first is not None and long_first <= 4 + 24 // 8 + 2
