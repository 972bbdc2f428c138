"""The torch reference of paged decode attention: a large batch on the CPU is attended in groups of similar context
length, with the same result as one sequence at a time."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.backends.paged import attention
from engine.backends.paged.attention import decode_attention, gather_kv

BLOCK, KV_HEADS, HEADS, DIM = 4, 2, 4, 8


def _batch(lens: list[int], seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    n_blocks = sum(-(-n // BLOCK) for n in lens) + 3
    k_cache = torch.randn(n_blocks, BLOCK, KV_HEADS, DIM, generator=g, dtype=torch.float64)
    v_cache = torch.randn(n_blocks, BLOCK, KV_HEADS, DIM, generator=g, dtype=torch.float64)
    width = max(-(-n // BLOCK) for n in lens)
    free = torch.randperm(n_blocks, generator=g).tolist()  # each sequence's blocks scattered through the pool
    tables = torch.zeros(len(lens), width, dtype=torch.int32)
    for i, n in enumerate(lens):
        for j in range(-(-n // BLOCK)):
            tables[i, j] = free.pop()
    q = torch.randn(len(lens), HEADS, DIM, generator=g, dtype=torch.float64)
    return q, k_cache, v_cache, tables, torch.tensor(lens, dtype=torch.int32)


def _one_at_a_time(q, k_cache, v_cache, tables, lens, scale):
    out = []
    for i, n in enumerate(lens.tolist()):
        k, v = gather_kv(k_cache, tables[i], n), gather_kv(v_cache, tables[i], n)  # [n, kv_heads, dim]
        o = F.scaled_dot_product_attention(q[i][:, None, :], k.transpose(0, 1), v.transpose(0, 1), scale=scale,
                                           enable_gqa=True)  # fmt: skip
        out.append(o[:, 0])
    return torch.stack(out)


def _calls(monkeypatch) -> list[int]:
    sizes: list[int] = []
    padded = attention._decode_padded

    def counting(q, *args):
        sizes.append(q.shape[0])
        return padded(q, *args)

    monkeypatch.setattr(attention, "_decode_padded", counting)
    return sizes


def test_a_large_batch_of_spread_contexts_is_attended_in_groups_as_one_sequence_at_a_time(monkeypatch):
    lens = torch.randint(1, 120, (45,), generator=torch.Generator().manual_seed(3)).tolist()
    lens[7] = 1  # a padding row's context
    q, k_cache, v_cache, tables, ctx = _batch(lens)
    sizes = _calls(monkeypatch)
    got = decode_attention(q, k_cache, v_cache, tables, ctx, 0.3, max(lens))
    assert len(sizes) == attention.DECODE_GROUPS and sum(sizes) == len(lens)
    torch.testing.assert_close(got, _one_at_a_time(q, k_cache, v_cache, tables, ctx, 0.3), rtol=1e-12, atol=1e-12)


def test_contexts_of_one_length_or_a_small_batch_are_attended_in_one_call(monkeypatch):
    sizes = _calls(monkeypatch)
    for lens in ([50] * 40, [3, 90, 17]):
        q, k_cache, v_cache, tables, ctx = _batch(lens, seed=len(lens))
        got = decode_attention(q, k_cache, v_cache, tables, ctx, 0.5)
        torch.testing.assert_close(got, _one_at_a_time(q, k_cache, v_cache, tables, ctx, 0.5), rtol=1e-12, atol=1e-12)
    assert sizes == [40, 3]
