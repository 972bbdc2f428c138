"""The padded decode batches CUDA graphs replay, run eagerly on the CPU: padding rows change nothing."""

from __future__ import annotations

import torch

from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence import Sequence
from engine.types import SamplingParams

from .helpers import make_runner
from .test_batching import tiny_model


def test_a_padded_decode_batch_gives_the_same_logits_and_stores_nothing_extra():
    model = tiny_model()
    runner = make_runner(model, num_blocks=32, block_size=4)
    bm = BlockManager(32, 4, enable_prefix_caching=False)
    seqs = [Sequence(list(range(i, i + n)), SamplingParams(temperature=0), block_size=4) for i, n in ((1, 9), (5, 14), (2, 3))]
    for s in seqs:  # prefill everything but the last token, which the decode step computes
        bm.allocate(s)
        bm.append_slots(s, s.num_tokens - 1)
        runner.run(runner.prepare([ScheduledSeq(s, s.num_tokens - 1)]))
        s.num_computed_tokens = s.num_tokens - 1
    for s in seqs:
        bm.append_slots(s, 1)
    batch = runner.prepare([ScheduledSeq(s, 1) for s in seqs])
    before = [(k.clone(), v.clone()) for k, v in runner.kv_caches]
    plain = runner.run(batch)
    after_plain = [(k.clone(), v.clone()) for k, v in runner.kv_caches]
    for (k, v), (k0, v0) in zip(runner.kv_caches, before, strict=True):
        k.copy_(k0)
        v.copy_(v0)
    padded = runner.forward_padded(batch, 8)
    torch.testing.assert_close(padded, plain, atol=1e-10, rtol=0)
    real_slots = sorted(batch.meta.slot_mapping.tolist())
    for (k, v), (k0, _), (k1, v1) in zip(runner.kv_caches, before, after_plain, strict=True):
        changed = (k.flatten(0, 1) != k0.flatten(0, 1)).any(-1).any(-1).nonzero().flatten().tolist()
        assert changed == real_slots  # padding rows wrote no slot
        torch.testing.assert_close(k, k1, atol=1e-12, rtol=0)
        torch.testing.assert_close(v, v1, atol=1e-12, rtol=0)
