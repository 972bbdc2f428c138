"""Persistent rows: block tables written only when they change, sampling batched from per-row parameters, and
the engine's output the same whichever path a step takes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.sampler import RequestSampler, SamplingBatch, sample, sample_batched
from engine.backends.paged.sequence import Sequence, SequenceStatus
from engine.backends.paged.sequence_rows import SequenceRows
from engine.types import SamplingParams

from .test_batching import VOCAB, drive, engine_for, make_seq, tiny_model

CPU = torch.device("cpu")


def _apply(rows: SequenceRows) -> tuple[np.ndarray, np.ndarray]:
    """The writes a step would stage, applied to the mirror as a step applies them."""
    idx, vals = rows.take_updates()
    rows.dev.view(-1)[torch.from_numpy(idx).long()] = torch.from_numpy(vals)
    return idx, vals


def test_a_table_is_written_once_then_only_its_new_blocks_and_the_mirror_follows():
    rows = SequenceRows(4, 8, CPU, mirror=True)
    bm = BlockManager(32, 4, enable_prefix_caching=False)
    a, b = (Sequence(list(range(n)), SamplingParams(), block_size=4) for n in (9, 5))
    for s in (a, b):
        bm.allocate(s)
        bm.append_slots(s, s.num_tokens)
    r = rows.rows_for([a, b]).tolist()
    idx, _ = _apply(rows)
    assert len(idx) == len(a.block_table) + len(b.block_table)
    a.num_computed_tokens = 9
    bm.append_slots(a, 4)  # a gains one block
    assert rows.rows_for([a, b]).tolist() == r
    idx, vals = _apply(rows)
    assert vals.tolist() == [a.block_table[-1]] and idx.tolist() == [r[0] * 8 + 3]
    assert rows.rows_for([a, b]).tolist() == r and len(_apply(rows)[0]) == 0  # nothing changed
    bm.free(b)  # preempted: a new list of other blocks when it comes back
    bm.allocate(b)
    bm.append_slots(b, 12)
    rows.rows_for([b, a])
    _apply(rows)
    table = rows.dev.numpy()
    assert table[r[1], :3].tolist() == b.block_table and table[r[0], :4].tolist() == a.block_table


def test_rows_of_finished_sequences_are_reclaimed_and_a_released_row_is_reused():
    rows = SequenceRows(2, 4, CPU)
    seqs = [Sequence([1, 2], SamplingParams(), block_size=4) for _ in range(4)]
    for s in seqs:
        s.block_table = [len(s.token_ids)]
    first = rows.rows_for(seqs[:2]).tolist()
    seqs[0].status = SequenceStatus.FINISHED  # nobody released it
    third = rows.rows_for([seqs[1], seqs[2]]).tolist()
    assert third[0] == first[1] and third[1] == first[0]
    rows.release(seqs[1])
    assert rows.rows_for([seqs[3]]).tolist() == [first[1]]
    assert rows.rows_for(seqs).tolist() and rows.capacity >= 4  # a step wider than the rows grows them


def _batched(samplers: list[RequestSampler], rows: SequenceRows, r: np.ndarray) -> SamplingBatch:
    cols = torch.from_numpy(rows.sampling_columns(r).T.copy())
    drawing = ~rows.greedy[r]
    top = bool(((rows.top_k[r] > 0) | (rows.top_p[r] < 1.0))[drawing].any())
    ban = bool(rows.ban_eos[r].any())
    return SamplingBatch(greedy=cols[1], temperature=cols[0].view(torch.float32), top_k=cols[5],
                         top_p=cols[6].view(torch.float32), min_p=cols[7].view(torch.float32), seed_hi=cols[2],
                         seed_lo=cols[3], draws=cols[4], all_greedy=not drawing.any(), top=top,
                         floor=bool((rows.min_p[r] > 0)[drawing].any()), ban_eos=cols[8] if ban else None,
                         end_ids=rows.end_ids_dev if ban else None)  # fmt: skip


ENDS = [5, 11]  # the end-of-generation tokens of the sampling tests' vocabulary


def test_batched_sampling_draws_the_per_request_samplers_tokens():
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0.8, seed=3),
              SamplingParams(temperature=1.0, top_k=3, seed=4), SamplingParams(temperature=1.2, top_p=0.7, seed=5),
              SamplingParams(temperature=1.0, min_p=0.2, seed=6), SamplingParams(temperature=0.5),
              SamplingParams(temperature=0, ignore_eos=True), SamplingParams(temperature=0.9, seed=8, ignore_eos=True)]  # fmt: skip
    make = lambda p: RequestSampler(p, vocab_size=VOCAB, eos_ids=ENDS, device=CPU)  # noqa: E731
    slow, fast = [make(p) for p in params], [make(p) for p in params]
    fast[5].seed = slow[5].seed  # the unseeded request: the same random seed on both sides
    seqs = [Sequence([1], p, block_size=4, owner=type("Owner", (), {"sampler": f})()) for p, f in zip(params, fast, strict=True)]
    rows = SequenceRows(8, 2, CPU, end_ids=ENDS)
    r = rows.rows_for(seqs)
    assert rows.batched[r].all() and rows.ban_eos[r].tolist() == [False] * 6 + [True] * 2
    g = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(40):
        logits = torch.randn(len(params), VOCAB, generator=g, dtype=torch.float64).float() * 3
        logits[:, ENDS[_ % 2]] += 6.0  # an end token is the likeliest: only the rows that ban it skip it
        want = sample(logits, slow, [([1], 1)] * len(params)).tokens
        got = sample_batched(logits.clone(), _batched(fast, rows, r)).tolist()
        rows.count_draws(r)
        assert got == want
        assert not set(got[6:]) & set(ENDS)
        ended += bool(set(got[:6]) & set(ENDS))
    assert ended >= 20
    assert rows.draws[r].tolist() == [s.draws for s in slow]


def test_a_request_that_bans_other_end_tokens_than_the_models_takes_its_own_sampler():
    params = SamplingParams(temperature=0, ignore_eos=True)
    seqs = [Sequence([1], params, block_size=4, owner=type("Owner", (), {"sampler": RequestSampler(
        params, vocab_size=VOCAB, eos_ids=ends, device=CPU)})()) for ends in (ENDS, [5], [])]  # fmt: skip
    rows = SequenceRows(8, 2, CPU, end_ids=ENDS)
    r = rows.rows_for(seqs)
    assert rows.batched[r].tolist() == [True, False, True]
    plain = SequenceRows(8, 2, CPU)  # rows that do not know the model's ends: ignore_eos takes its sampler
    assert not plain.batched[plain.rows_for(seqs[:1])].any()


def test_the_engine_gives_the_same_tokens_on_the_batched_and_per_request_paths():
    model = tiny_model()
    g = torch.Generator().manual_seed(5)
    specs = [
        SamplingParams(temperature=0, max_tokens=14), SamplingParams(temperature=0.9, seed=11, max_tokens=16),
        SamplingParams(temperature=1.0, top_k=20, seed=5, max_tokens=12),
        SamplingParams(temperature=0.7, top_p=0.9, seed=2, max_tokens=15),
    ]  # fmt: skip
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (7, 19, 4, 11)]
    solo = []  # each alone, sampled by its request's sampler
    for prompt, params in zip(prompts, specs, strict=True):
        s = make_seq(prompt, params)
        drive(engine_for(model), [s])
        solo.append(s.completion_token_ids)
    engine = engine_for(model, num_kv_blocks=14, max_num_batched_tokens=16, max_num_seqs=8)
    engine.runner.rows = SequenceRows(16, engine.config.max_blocks_per_seq, CPU, mirror=True)  # the CUDA bookkeeping
    seqs = [make_seq(p, params) for p, params in zip(prompts, specs, strict=True)]
    # a logprobs request joins for a while: its steps sample every row with its request's sampler
    extra = make_seq(prompts[0], SamplingParams(temperature=0, logprobs=2, max_tokens=5))
    paths: set[bool] = set()
    prepare = engine.runner.prepare
    engine.runner.prepare = lambda sch, sample=False: _seen(prepare(sch, sample=sample), paths)  # which path each took
    for s in seqs:
        engine.add(s)
    step = 0
    while engine.has_work:
        if step == 6:
            engine.add(extra)
        for seq in engine.step().seqs:
            if seq.num_completion_tokens >= seq.params.max_tokens:
                engine.finish(seq)
        step += 1
    assert paths == {True, False} and engine.scheduler.num_preemptions >= 1
    for i, s in enumerate(seqs):
        assert s.completion_token_ids == solo[i], f"request {i} changed"
    assert not engine.runner.rows._row  # every finished sequence gave its row back


def _seen(batch, paths: set):
    paths.add(batch.sampling is not None)
    return batch


def test_the_warm_up_runs_its_steps_and_leaves_the_engine_as_it_found_it():
    engine = engine_for(tiny_model(), max_num_seqs=4)
    runner = engine.runner
    runner.warm_up(always=True)  # the torch ops compile nothing, so a load skips it; its steps still run here
    assert not runner.rows._row and engine.block_manager.num_used_blocks == 0
    s = make_seq([3, 1, 4, 1, 5], SamplingParams(temperature=0, max_tokens=6))
    drive(engine, [s])
    fresh = make_seq([3, 1, 4, 1, 5], SamplingParams(temperature=0, max_tokens=6))
    drive(engine_for(tiny_model(), max_num_seqs=4), [fresh])
    assert s.completion_token_ids == fresh.completion_token_ids


def test_decode_steps_laid_out_for_the_graphs_give_the_plain_engines_tokens():
    """The graphs' step (one input block, tables gathered by row, padding rows, sampling inside) run eagerly on
    the CPU, as a replay would run it: the same tokens as the engine without graphs, greedy and seeded."""
    from engine.backends.paged.cuda_graphs import DecodeGraphs

    model = tiny_model()
    g = torch.Generator().manual_seed(9)
    specs = [SamplingParams(temperature=0, max_tokens=12), SamplingParams(temperature=0.8, seed=4, max_tokens=10),
             SamplingParams(temperature=1.0, top_p=0.8, seed=6, max_tokens=9)]  # fmt: skip
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (6, 13, 9)]
    results = []
    for graphs in (False, True):
        engine = engine_for(model, max_num_seqs=4, cuda_graph_batch_sizes=(1, 2, 4))
        engine.runner.rows = SequenceRows(16, engine.config.max_blocks_per_seq, CPU, mirror=True)
        if graphs:
            engine.runner.graphs = DecodeGraphs(engine.runner, eager=True)
        seqs = [make_seq(p, params) for p, params in zip(prompts, specs, strict=True)]
        laid_out: set[bool] = set()
        engine.runner.prepare = _recording(engine.runner.prepare, laid_out)
        results.append(_generate(engine, seqs))
        # with graphs: 3 decodes padded to 4, then 2 (one has top-p: the graph gives hidden states), then 1
        assert (True in laid_out) is graphs
    assert results[0] == results[1]


def _recording(prepare, seen: set, note=lambda batch: batch.graph_inputs is not None):
    """``prepare`` that notes something of each step: by default whether it was laid out for the graphs."""

    def wrapped(scheduled, sample=False, eager=False):
        batch = prepare(scheduled, sample=sample, eager=eager)
        seen.add(note(batch))
        return batch

    return wrapped


def _generate(engine, seqs: list[Sequence]) -> list[list[int]]:
    """Each sequence's tokens, the engine stepped until every one has its max_tokens."""
    for s in seqs:
        engine.add(s)
    while engine.has_work:
        for seq in engine.step().seqs:
            if seq.num_completion_tokens >= seq.params.max_tokens:
                engine.finish(seq)
    return [s.completion_token_ids for s in seqs]


def test_ignore_eos_requests_sample_batched_and_inside_the_graphs_step_never_ending():
    """ignore_eos, the benchmarks' setting, takes the batched path and the graphs' sampling step: the same tokens
    as its request's own sampler, and never the end token, which the same request without it would draw."""
    from engine.backends.paged.cuda_graphs import DecodeGraphs

    model = tiny_model()
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    plain = make_seq(prompt, SamplingParams(temperature=0, max_tokens=12))
    drive(engine_for(model), [plain])
    end = plain.completion_token_ids[3]  # the model's "end of generation" here: greedy decoding draws it
    specs = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
             SamplingParams(temperature=0.8, seed=3, max_tokens=12, ignore_eos=True),
             SamplingParams(temperature=0, max_tokens=12)]  # fmt: skip
    results = {}
    for mode in ("per request", "batched", "graphs"):
        engine = engine_for(model, max_num_seqs=4, cuda_graph_batch_sizes=(1, 2, 4))
        ends = () if mode == "per request" else (end,)
        engine.runner.rows = SequenceRows(16, engine.config.max_blocks_per_seq, CPU, mirror=True, end_ids=ends)
        if mode == "graphs":
            engine.runner.graphs = DecodeGraphs(engine.runner, eager=True)
        seqs = []
        for p in specs:
            sampler = RequestSampler(p, vocab_size=VOCAB, eos_ids=[end], device=CPU)
            seqs.append(Sequence(prompt, p, block_size=4, owner=type("Owner", (), {"sampler": sampler, "drafter": None})()))
        seen: set[tuple[bool, bool]] = set()
        engine.runner.prepare = _recording(engine.runner.prepare, seen,
                                           lambda b: (b.host_rows is not None, b.graph_inputs is not None))  # fmt: skip
        results[mode] = _generate(engine, seqs)
        batched = {b for b, _ in seen}
        assert batched == ({False} if mode == "per request" else {True}), mode
        assert ((True, True) in seen) is (mode == "graphs")
    assert results["per request"] == results["batched"] == results["graphs"]
    greedy, drawn, free = results["batched"]
    assert free == plain.completion_token_ids and free[3] == end
    assert end not in greedy and end not in drawn and greedy != free


def test_a_thinking_budget_samples_its_row_alone_until_the_thinking_closes_then_batched():
    """A row whose thinking budget may still force a token samples with its request's sampler; once the closing tag
    is forced it goes back to the batched path, and its tokens from there are what batched sampling gives."""
    from engine.tools.thinking_budget import ThinkingBudget

    model = tiny_model()
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    free = make_seq(prompt, SamplingParams(temperature=0, max_tokens=10))
    drive(engine_for(model), [free])
    close = next(t for t in range(VOCAB) if t not in free.completion_token_ids)  # a token greedy never draws here
    params = SamplingParams(temperature=0, max_tokens=10, thinking_budget=3)
    budget = ThinkingBudget(3, ("<t>", "</t>"), [close], lambda t: b"w", started=True, shown={close: b"</t>"})
    sampler = RequestSampler(params, vocab_size=VOCAB, eos_ids=[], device=CPU, thinking=budget)
    seq = Sequence(prompt, params, block_size=4, owner=SimpleNamespace(sampler=sampler, drafter=None))
    other = make_seq(prompt[::-1], SamplingParams(temperature=0, max_tokens=10))
    engine = engine_for(model, max_num_seqs=4)
    seen: list[bool] = []
    prepare = engine.runner.prepare
    engine.runner.prepare = lambda scheduled, sample=False, eager=False: _noted(prepare(scheduled, sample=sample, eager=eager), seen)
    budgeted, other_tokens = _generate(engine, [seq, other])
    assert budgeted[:3] == free.completion_token_ids[:3] and budgeted[3] == close  # three thought, then the tag
    assert not budget.pending and not engine.runner.rows.budgeted
    assert seen[:4] == [False] * 4 and seen[-1]  # one by one while the tag may be forced, then batched
    alone = make_seq(prompt[::-1], SamplingParams(temperature=0, max_tokens=10))
    drive(engine_for(model), [alone])
    assert other_tokens == alone.completion_token_ids  # the other request never noticed


def _noted(batch, seen: list[bool]):
    seen.append(batch.host_rows is not None)
    return batch
