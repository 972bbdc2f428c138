"""The block manager on its own: allocation, reference counts, prefix caching, eviction. No torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.sequence import Sequence
from engine.types import SamplingParams

BS = 4
GREEDY = SamplingParams(temperature=0)


def seq(tokens) -> Sequence:
    return Sequence(list(tokens), GREEDY, block_size=BS)


def run_prefill(bm: BlockManager, s: Sequence) -> None:
    """Allocate, compute the whole prompt, register its blocks (what a prefill step does)."""
    bm.allocate(s)
    n = s.num_tokens - s.num_computed_tokens
    bm.append_slots(s, n)
    s.num_computed_tokens += n
    bm.commit(s)


def test_scheduler_and_block_manager_import_no_torch():
    root = Path(__file__).resolve().parents[3]
    code = (
        "import sys; import engine.backends.paged.scheduler, engine.backends.paged.block_manager;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"


def test_blocks_cover_the_tokens_and_are_freed():
    bm = BlockManager(8, BS)
    s = seq(range(10))
    assert bm.can_allocate(s, 10)
    run_prefill(bm, s)
    assert len(s.block_table) == 3 and len(set(s.block_table)) == 3
    assert bm.num_used_blocks == 3
    bm.free(s)
    assert bm.num_used_blocks == 0 and bm.num_free_blocks == 8 and s.block_table == []


def test_can_append_says_no_when_blocks_run_out():
    bm = BlockManager(2, BS)
    s = seq(range(8))
    run_prefill(bm, s)
    assert bm.can_append(s, 0)
    assert not bm.can_append(s, 1)  # a 9th token needs a third block
    with pytest.raises(RuntimeError):
        bm.append_slots(s, 1)


def test_a_shared_prefix_is_reused_and_reference_counted():
    bm = BlockManager(16, BS)
    a = seq([1, 2, 3, 4, 5, 6, 7, 8, 9])
    run_prefill(bm, a)
    b = seq([1, 2, 3, 4, 5, 6, 7, 8, 42, 43])
    bm.allocate(b)
    assert b.num_cached_tokens == 8
    assert b.block_table == a.block_table[:2]
    assert all(bm.blocks[i].ref_count == 2 for i in a.block_table[:2])
    bm.free(a)
    assert all(bm.blocks[i].ref_count == 1 for i in b.block_table)
    assert bm.hit_rate == pytest.approx(8 / (9 + 10))


def test_the_last_token_is_never_served_from_cache():
    bm = BlockManager(16, BS)
    a = seq(range(8))
    run_prefill(bm, a)
    bm.free(a)
    b = seq(range(8))  # the same prompt: its logits still need its last token computed
    bm.allocate(b)
    assert b.num_cached_tokens == 4


def test_a_different_earlier_block_breaks_the_chain():
    bm = BlockManager(16, BS)
    run_prefill(bm, seq([1, 2, 3, 4, 5, 6, 7, 8, 9]))
    other = seq([9, 9, 9, 9, 5, 6, 7, 8, 9])  # same second block, different first
    assert bm.match_prefix(other) == []


def test_a_hash_collision_is_caught_by_comparing_tokens(monkeypatch):
    import engine.backends.paged.block_manager as mod

    monkeypatch.setattr(mod, "block_hash", lambda parent, tokens: 7)  # every block hashes alike
    bm = BlockManager(16, BS)
    run_prefill(bm, seq([1, 2, 3, 4, 0]))
    assert bm.match_prefix(seq([5, 6, 7, 8, 0])) == []
    assert len(bm.match_prefix(seq([1, 2, 3, 4, 0]))) == 1


def test_cached_blocks_survive_until_memory_is_needed_then_lru_goes_first():
    bm = BlockManager(4, BS)
    a = seq(range(0, 9))  # 2 full blocks + 1
    run_prefill(bm, a)
    bm.free(a)
    assert bm.num_free_blocks == 4 and bm.num_cached_blocks == 2
    b = seq(range(100, 105))  # needs 2 blocks: served from the 2 never-hashed ones first
    run_prefill(bm, b)
    assert bm.num_cached_blocks == 3  # a's two, plus b's first block
    assert len(bm.match_prefix(seq(range(0, 9)))) == 2
    c = seq(range(200, 206))  # 2 more blocks: must evict a's, the tail block first
    run_prefill(bm, c)
    assert len(bm.match_prefix(seq(range(0, 9)))) == 0
    assert bm.num_free_blocks == 0


def test_reviving_an_evictable_block_takes_it_out_of_the_free_pool():
    bm = BlockManager(3, BS)
    a = seq(range(9))
    run_prefill(bm, a)
    bm.free(a)
    b = seq(range(9))
    assert bm.can_allocate(b, 1)  # 2 cached + 1 fresh: exactly fits
    bm.allocate(b)
    assert bm.num_free_blocks == 1
    bm.append_slots(b, 1)
    assert bm.num_free_blocks == 0


def test_identical_blocks_computed_twice_keep_one_cache_entry():
    bm = BlockManager(16, BS)
    a, b = seq(range(9)), seq(range(9))
    bm.allocate(a)
    bm.allocate(b)  # nothing cached yet: both compute the same blocks side by side
    for s in (a, b):
        bm.append_slots(s, 9)
        s.num_computed_tokens = 9
        bm.commit(s)
    assert bm.num_cached_blocks == 2
    bm.free(a)
    bm.free(b)
    assert bm.num_free_blocks == 16
