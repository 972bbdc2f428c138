"""Continuous batching changes nothing about a request's output: a batch mixing chunked prefills,
decodes, a preempted request and a prefix-cache hit gives each request what it gets alone."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from engine.backends.paged.config import EngineConfig
from engine.backends.paged.llm_engine import LLMEngine
from engine.backends.paged.model_runner import ModelRunner
from engine.backends.paged.models.llama import Model, ModelArgs
from engine.backends.paged.sampler import RequestSampler
from engine.backends.paged.sequence import Sequence
from engine.types import SamplingParams

VOCAB = 97


def tiny_model() -> Model:
    # float64: no near-ties between logits, so any difference in the computation would show
    torch.manual_seed(0)
    args = ModelArgs(model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=512,
                     rope={"rope_theta": 10000.0, "rope_type": "default"})  # fmt: skip
    model = Model(args)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return model.double().eval()


def engine_for(model: Model, **cfg) -> LLMEngine:
    config = EngineConfig(block_size=4, max_model_len=256, **cfg)
    runner = ModelRunner(model, config, torch.device("cpu"))
    blocks = config.num_kv_blocks or 128
    runner.allocate_kv_cache(blocks)
    return LLMEngine(runner, config, blocks)


def make_seq(prompt: list[int], params: SamplingParams) -> Sequence:
    sampler = RequestSampler(params, vocab_size=VOCAB, eos_ids=[], device=torch.device("cpu"))
    return Sequence(prompt, params, block_size=4, owner=SimpleNamespace(sampler=sampler, drafter=None))


def drive(engine: LLMEngine, seqs: list[Sequence], arrivals: dict[int, list[Sequence]] | None = None) -> dict:
    """Step until every sequence has its max_tokens; returns the mixing seen along the way."""
    arrivals = arrivals or {}
    for s in seqs:
        engine.add(s)
    seen = {"mixed_steps": 0, "chunked": False}
    step = 0
    while engine.has_work or any(k >= step for k in arrivals):
        for s in arrivals.get(step, []):
            engine.add(s)
        out = engine.scheduler.schedule()
        kinds = {x.num_tokens == 1 for x in out.scheduled}
        seen["mixed_steps"] += kinds == {True, False}
        seen["chunked"] |= any(not x.samples and x.num_tokens > 1 for x in out.scheduled)
        _run(engine, out)
        for s in list(engine.scheduler.running):
            if s.num_completion_tokens >= s.params.max_tokens:
                engine.finish(s)
        step += 1
    return seen


def _run(engine: LLMEngine, out) -> None:
    from engine.backends.paged.sampler import sample

    if out.is_empty:
        return
    batch = engine.runner.prepare(out.scheduled)
    logits = engine.runner.run(batch)
    rows = [x.seq for x in batch.sampled]
    res = sample(logits, [s.owner.sampler for s in rows], [(s.token_ids, s.num_prompt_tokens) for s in rows])
    engine.scheduler.postprocess(out, {s.seq_id: t for s, t in zip(rows, res.tokens, strict=True)})


def test_mixed_batch_gives_every_request_its_solo_output():
    model = tiny_model()
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(0, VOCAB, (24,), generator=g).tolist()
    specs = [  # (prompt, params)
        (shared + [5, 6, 7], SamplingParams(temperature=0, max_tokens=20)),
        (torch.randint(0, VOCAB, (37,), generator=g).tolist(), SamplingParams(temperature=0.9, seed=11, max_tokens=24)),
        (torch.randint(0, VOCAB, (5,), generator=g).tolist(), SamplingParams(temperature=0, max_tokens=30)),
        (torch.randint(0, VOCAB, (18,), generator=g).tolist(), SamplingParams(temperature=1.0, top_k=20, seed=5, max_tokens=24)),
        (shared + [9, 9], SamplingParams(temperature=0, max_tokens=16)),  # arrives later: a prefix-cache hit
        (torch.randint(0, VOCAB, (9,), generator=g).tolist(), SamplingParams(temperature=0.7, top_p=0.9, seed=2, max_tokens=18)),
    ]  # fmt: skip

    solo = []
    for prompt, params in specs:
        s = make_seq(prompt, params)
        drive(engine_for(model), [s])
        solo.append(s.completion_token_ids)

    # 30 blocks of 4 tokens cannot hold every sequence at full length: someone is preempted.
    engine = engine_for(model, num_kv_blocks=30, max_num_batched_tokens=16, max_num_seqs=8)
    seqs = [make_seq(p, params) for p, params in specs]
    seen = drive(engine, [s for i, s in enumerate(seqs) if i != 4], arrivals={6: [seqs[4]]})

    assert engine.scheduler.num_preemptions >= 1
    assert seqs[4].num_cached_tokens >= 16
    assert seen["chunked"] and seen["mixed_steps"] > 0
    for i, s in enumerate(seqs):
        assert s.completion_token_ids == solo[i], f"request {i} changed when batched"
    assert engine.block_manager.num_used_blocks == 0
