"""The batched sampler: filters, penalties, bias, per-request seeds, logprobs."""

from __future__ import annotations

import pytest
import torch

from engine.backends.paged import sampler as sampler_module
from engine.backends.paged.sampler import RequestSampler, race_noise, sample
from engine.errors import InvalidRequest
from engine.types import SamplingParams

V = 8
CPU = torch.device("cpu")


def rs(**kw) -> RequestSampler:
    return RequestSampler(SamplingParams(**kw), vocab_size=V, eos_ids=[0], device=CPU)


def draw(logits, sampler, n=300, history=([1], 1)) -> list[int]:
    return [sample(logits[None], [sampler], [history]).tokens[0] for _ in range(n)]


LOGITS = torch.log(torch.tensor([0.05, 0.4, 0.25, 0.15, 0.08, 0.04, 0.02, 0.01]))


def test_greedy_takes_the_argmax():
    assert sample(LOGITS[None], [rs(temperature=0)], [([3], 1)]).tokens == [1]


def test_top_k_top_p_min_p_keep_only_the_allowed_tokens():
    assert set(draw(LOGITS, rs(temperature=1.0, top_k=2, seed=1))) == {1, 2}
    assert set(draw(LOGITS, rs(temperature=1.0, top_p=0.6, seed=1))) == {1, 2}  # 0.4 + 0.25 covers 0.6
    assert set(draw(LOGITS, rs(temperature=1.0, min_p=0.5, seed=1))) == {1, 2}  # >= 0.2
    many = set(draw(LOGITS, rs(temperature=1.0, seed=1), n=2000))
    assert {1, 2, 3, 4} <= many


def test_a_seeded_request_draws_the_same_tokens_whatever_shares_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(5, V)
    alone = [sample(logits[2:3], [rs(temperature=1.0, seed=42)], [([1], 1)]).tokens[0] for _ in range(1)]
    seq_alone, seq_batched = [], []
    a = rs(temperature=1.0, seed=42)
    for _ in range(30):
        seq_alone.append(sample(logits[2:3], [a], [([1], 1)]).tokens[0])
    b = rs(temperature=1.0, seed=42)
    others = [rs(temperature=1.0, seed=s) for s in (1, 2, 3, 4)]
    for step in range(30):
        rows = [others[0], others[1], b, others[2], others[3]][: 3 + step % 3]  # the batch changes each step
        tokens = sample(logits[: len(rows)], rows, [([1], 1)] * len(rows)).tokens
        seq_batched.append(tokens[2])
    assert seq_alone == seq_batched and seq_alone[0] == alone[0]
    c = rs(temperature=1.0, seed=43)
    assert [sample(logits[2:3], [c], [([1], 1)]).tokens[0] for _ in range(30)] != seq_alone


@pytest.mark.parametrize("rows", [1, 5, 37])
def test_the_cpus_race_in_blocks_of_rows_draws_what_the_whole_batch_noise_draws(rows, monkeypatch):
    monkeypatch.setattr(sampler_module, "RACE_BLOCK_ROWS", 16)  # 37 rows: two whole blocks and a part
    g = torch.Generator().manual_seed(rows)
    vocab = 3001
    probs = torch.randn(rows, vocab, generator=g).mul(4).softmax(-1)
    probs[:, ::5] = 0  # filtered-out tokens never win
    keys = torch.randint(0, 1 << 32, (rows, 3), generator=g, dtype=torch.int64)
    keys[0] = (1 << 32) - 1  # every bit of the seed's halves and of the draw count set
    expected = (probs / race_noise(keys, vocab)).argmax(-1)
    assert torch.equal(sampler_module._race(probs, keys), expected)  # the CPU path: int32 blocks
    assert (expected % 5 != 0).all()


def test_the_top_hash_neither_draws_a_token_of_probability_0_nor_loses_one_above_it():
    # key (0, 19575, 0) hashes token 895 to the top value, where u rounds to 1 in float32 and -log(u) to -0.0
    probs = torch.zeros(2, 1000)
    probs[0, 3], probs[1, 3], probs[1, 895] = 1.0, 0.5, 0.5
    keys = torch.tensor([[0, 19575, 0]] * 2)
    assert race_noise(keys, 1000)[0, 895] > 0
    assert sampler_module._race(probs, keys).tolist() == [3, 895]  # the CPU path
    assert (probs / race_noise(keys, 1000)).argmax(-1).tolist() == [3, 895]  # the kernels' reference
    assert sampler_module._race(probs.to(torch.bfloat16), keys).tolist() == [3, 895]
    assert sampler_module._race(probs[:0], keys[:0]).tolist() == []


def test_penalties_push_down_tokens_already_used():
    logits = torch.tensor([0.0, 3.0, 2.9, 0, 0, 0, 0, 0])
    history = ([5, 1, 1], 1)  # prompt [5]; output [1, 1]
    assert sample(logits[None], [rs(temperature=0)], [history]).tokens == [1]
    assert sample(logits[None], [rs(temperature=0, frequency_penalty=0.1)], [history]).tokens == [2]
    assert sample(logits[None], [rs(temperature=0, presence_penalty=0.2)], [history]).tokens == [2]
    assert sample(logits[None], [rs(temperature=0, repetition_penalty=1.1)], [history]).tokens == [2]
    prompt_only = ([1], 1)  # repetition counts the prompt; presence/frequency only the output
    assert sample(logits[None], [rs(temperature=0, repetition_penalty=1.1)], [prompt_only]).tokens == [2]
    assert sample(logits[None], [rs(temperature=0, presence_penalty=2.0)], [prompt_only]).tokens == [1]
    # llama.cpp's repeat_last_n: all three read the last N tokens of prompt and output (0: none)
    assert sample(logits[None], [rs(temperature=0, presence_penalty=2.0, penalty_last_n=64)], [prompt_only]).tokens == [2]
    assert sample(logits[None], [rs(temperature=0, presence_penalty=2.0, penalty_last_n=1)], [([1, 5], 2)]).tokens == [1]
    assert sample(logits[None], [rs(temperature=0, repetition_penalty=5.0, penalty_last_n=0)], [history]).tokens == [1]


def test_penalised_and_plain_rows_in_one_batch_do_not_leak_into_each_other():
    logits = torch.tensor([[0.0, 3.0, 2.9, 0, 0, 0, 0, 0]] * 2)
    out = sample(logits, [rs(temperature=0, frequency_penalty=0.5), rs(temperature=0)], [([1, 1], 0), ([1, 1], 0)])
    assert out.tokens == [2, 1]


def test_logit_bias_and_ignore_eos():
    assert sample(LOGITS[None], [rs(temperature=0, logit_bias={6: 100})], [([1], 1)]).tokens == [6]
    eos_top = torch.tensor([5.0, 1, 0, 0, 0, 0, 0, 0])
    assert sample(eos_top[None], [rs(temperature=0)], [([1], 1)]).tokens == [0]
    assert sample(eos_top[None], [rs(temperature=0, ignore_eos=True)], [([1], 1)]).tokens == [1]
    with pytest.raises(InvalidRequest):
        rs(logit_bias={V + 3: 1.0})


def test_logprobs_come_from_the_raw_distribution():
    out = sample(LOGITS[None], [rs(temperature=0, logprobs=3, presence_penalty=1.0)], [([1, 1], 1)])
    chosen, ids, values = out.logprobs[0]
    want = LOGITS.log_softmax(-1)
    assert ids == [1, 2, 3]
    assert values == pytest.approx(want[[1, 2, 3]].tolist(), abs=1e-6)
    assert chosen == pytest.approx(float(want[out.tokens[0]]), abs=1e-6)
    assert sample(LOGITS[None], [rs(temperature=0)], [([1], 1)]).logprobs == [None]
