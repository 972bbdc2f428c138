"""Decode steps replayed as CUDA graphs, one graph per batch size.

A decode step's shapes depend only on the batch size once the block tables are padded to
the longest possible sequence, so a step of ``n`` sequences runs the graph of the smallest
captured size >= n, its extra rows padded: they store nothing (slot -1) and attend to a single
token. The padding itself is plain torch and runs (eagerly) on the CPU in the tests.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from engine.backends.paged.attention import AttentionMetadata
from engine.backends.paged.ops import ForwardContext

if TYPE_CHECKING:
    from engine.backends.paged.model_runner import ModelRunner, StepBatch

log = logging.getLogger(__name__)


def pad_decode_batch(
    batch: StepBatch, size: int, max_blocks: int
) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """A decode-only batch grown to ``size`` rows and block tables ``max_blocks`` wide."""
    n, dev, meta = batch.num_decodes, batch.input_ids.device, batch.meta
    ids = torch.zeros(size, dtype=torch.int64, device=dev)
    pos = torch.zeros(size, dtype=torch.int64, device=dev)
    slots = torch.full((size,), -1, dtype=torch.int64, device=dev)
    tables = torch.zeros(size, max_blocks, dtype=torch.int32, device=dev)
    lens = torch.ones(size, dtype=torch.int32, device=dev)
    ids[:n], pos[:n], slots[:n] = batch.input_ids, batch.positions, meta.slot_mapping
    decode_tables, decode_lens = meta.decode_tables
    tables[:n, : decode_tables.shape[1]] = decode_tables
    lens[:n] = decode_lens
    padded = AttentionMetadata(
        slot_mapping=slots,
        num_decodes=size,
        decode_block_tables=tables,
        decode_context_lens=lens,
        max_decode_context_len=meta.max_decode_context_len,
        has_padding=size > n,
    )
    return ids, pos, padded


class DecodeGraphs:
    """Captured decode graphs of one model runner, sharing one memory pool."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        cfg = runner.config
        self.sizes = [s for s in cfg.cuda_graph_batch_sizes if s <= cfg.max_num_seqs] or [1]
        big, width, dev = self.sizes[-1], cfg.max_blocks_per_seq, runner.device
        self.input_ids = torch.zeros(big, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(big, dtype=torch.int64, device=dev)
        self.slot_mapping = torch.full((big,), -1, dtype=torch.int64, device=dev)
        self.block_tables = torch.zeros(big, width, dtype=torch.int32, device=dev)
        self.context_lens = torch.ones(big, dtype=torch.int32, device=dev)
        self.hidden = torch.zeros(big, runner.model.args.hidden_size, dtype=runner.dtype, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.pool = None

    def fits(self, n: int) -> bool:
        return 0 < n <= self.sizes[-1]

    def _meta(self, size: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:size],
            num_decodes=size,
            decode_block_tables=self.block_tables[:size],
            decode_context_lens=self.context_lens[:size],
            max_decode_context_len=self.runner.config.max_model_len,
            has_padding=True,
        )

    @torch.inference_mode()
    def capture(self) -> None:
        r = self.runner
        for size in reversed(self.sizes):
            ctx = ForwardContext(self._meta(size), r.kv_caches, r.ops)
            ids, pos = self.input_ids[:size], self.positions[:size]
            self.hidden[:size] = r.model(ids, pos, ctx)  # warm-up: compiles kernels outside the capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, self.pool):
                self.hidden[:size] = r.model(ids, pos, ctx)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[size] = graph
            torch.cuda.synchronize()
        log.info("captured decode CUDA graphs for batch sizes %s", self.sizes)

    def replay(self, batch: StepBatch) -> torch.Tensor:
        """Hidden states [num_decodes, hidden] of a decode-only batch."""
        n, meta = batch.num_decodes, batch.meta
        size = next(s for s in self.sizes if s >= n)
        self.input_ids[:n] = batch.input_ids
        self.positions[:n] = batch.positions
        self.slot_mapping[:size].fill_(-1)
        self.slot_mapping[:n] = meta.slot_mapping
        decode_tables, decode_lens = meta.decode_tables
        self.context_lens[:size].fill_(1)
        self.context_lens[:n] = decode_lens
        self.block_tables[:size].zero_()
        self.block_tables[:n, : decode_tables.shape[1]] = decode_tables
        self.graphs[size].replay()
        return self.hidden[:n]


__all__ = ["DecodeGraphs", "pad_decode_batch"]
