"""A step's inputs go through one persistent host buffer and one copy; the tensors say what the schedule says."""

from __future__ import annotations

import torch

from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.model_runner import StepInputs
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence import Sequence
from engine.types import SamplingParams

from .helpers import make_runner
from .test_batching import tiny_model


def test_a_mixed_step_is_staged_in_one_reused_buffer_with_the_right_values():
    runner = make_runner(tiny_model(), num_blocks=32, block_size=4)
    bm = BlockManager(32, 4, enable_prefix_caching=False)
    a = Sequence(list(range(1, 10)), SamplingParams(temperature=0), block_size=4)
    b = Sequence(list(range(20, 27)), SamplingParams(temperature=0), block_size=4)
    for s in (a, b):
        bm.allocate(s)
    bm.append_slots(a, 9)
    a.num_computed_tokens = 8  # a decodes its last token; b prefills 5 of its 7
    bm.append_slots(b, 5)
    host = runner.inputs.host.data_ptr()
    first = runner.prepare([ScheduledSeq(a, 1), ScheduledSeq(b, 5)])
    assert first.input_ids.tolist() == [9, 20, 21, 22, 23, 24] and first.positions.tolist() == [8, 0, 1, 2, 3, 4]
    slot = lambda s, p: s.block_table[p // 4] * 4 + p % 4  # noqa: E731
    assert first.meta.slot_mapping.tolist() == [slot(a, 8)] + [slot(b, p) for p in range(5)]
    assert first.meta.slot_mapping.dtype == torch.int64
    # tables are rows of the persistent table, as wide as the longest sequence: the kernels see one stride
    width = runner.config.max_blocks_per_seq
    assert first.meta.decode_block_tables.tolist() == [a.block_table + [0] * (width - 3)]
    assert first.meta.decode_context_lens.tolist() == [9]
    assert first.meta.prefill_block_tables.tolist() == [b.block_table + [0] * (width - 2)]
    assert first.meta.prefill_cu_query_lens.tolist() == [1, 6] and first.meta.prefill_context_lens_t.tolist() == [5]
    assert first.sample_rows.tolist() == [0]  # b's chunk does not reach its last token
    second = runner.prepare([ScheduledSeq(a, 1)])
    assert runner.inputs.host.data_ptr() == host  # the same buffer, step after step
    assert second.input_ids.tolist() == [9] and first.input_ids.tolist() == [9, 20, 21, 22, 23, 24]


def test_the_buffer_grows_for_a_step_larger_than_it():
    inputs = StepInputs(torch.device("cpu"), capacity=4)
    ids, table = inputs.stage([(list(range(6)), (6,)), ([1, 2, 3, 4], (2, 2))])
    assert ids.tolist() == list(range(6)) and table.tolist() == [[1, 2], [3, 4]] and inputs.host.numel() >= 10
    assert table.data_ptr() % 64 == 0  # each part starts aligned: Triton compiles one variant per alignment
