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
    from engine.backends.paged.model_runner import ModelRunner
    from engine.backends.paged.step_batch import StepBatch

log = logging.getLogger(__name__)


def pad_decode_batch(
    batch: StepBatch, size: int, max_blocks: int, *, tables: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """A decode-only batch grown to ``size`` rows and block tables ``max_blocks`` wide (``tables``: the decode
    rows' block tables, when the batch's metadata does not carry them)."""
    n, dev, meta = batch.num_decodes, batch.input_ids.device, batch.meta
    ids = torch.zeros(size, dtype=torch.int64, device=dev)
    pos = torch.zeros(size, dtype=torch.int64, device=dev)
    slots = torch.full((size,), -1, dtype=torch.int64, device=dev)
    padded_tables = torch.zeros(size, max_blocks, dtype=torch.int32, device=dev)
    lens = torch.ones(size, dtype=torch.int32, device=dev)
    ids[:n], pos[:n], slots[:n] = batch.input_ids, batch.positions, meta.slot_mapping
    tables = tables if tables is not None else meta.decode_tables[0]
    if meta.decode_context_lens is None:
        raise ValueError(f"a step of {n} decodes came without their context lengths")
    padded_tables[:n, : tables.shape[1]] = tables
    lens[:n] = meta.decode_context_lens
    padded = AttentionMetadata(
        slot_mapping=slots,
        num_decodes=size,
        decode_block_tables=padded_tables,
        decode_context_lens=lens,
        max_decode_context_len=meta.max_decode_context_len,
        has_padding=size > n,
    )
    return ids, pos, padded


MODES = ("hidden", "greedy", "sample")  # what a replay gives: hidden states, or the sampled tokens


class DecodeGraphs:
    """Captured decode steps of one model runner, sharing one memory pool: per batch size, one graph to the
    hidden states (the sampler runs after it) and two to the sampled tokens (greedy only, and any mix of
    greedy and tempered rows), so a plain decode step is one host-to-device copy and one replay.

    A graph reads one int32 block of inputs (``step_batch.GRAPH_FIELDS`` by batch row) and gathers its rows'
    block tables from the runner's persistent table, so no step copies a table.
    """

    def __init__(self, runner: ModelRunner, *, eager: bool = False) -> None:
        from engine.backends.paged.step_batch import GRAPH_FIELDS

        self.runner = runner
        self.eager = eager  # run each step as the graphs record it, without capturing (the CPU tests)
        cfg = runner.config
        self.sizes = [s for s in cfg.cuda_graph_batch_sizes if s <= cfg.max_num_seqs] or [1]
        big, dev, rows = self.sizes[-1], runner.device, runner.rows
        width = -(-big // 16) * 16  # each field's row starts 64-byte aligned
        self.inputs = torch.zeros(len(GRAPH_FIELDS), width, dtype=torch.int32, device=dev)
        self.inputs[2].fill_(-1)  # padding: no slot, one token of context, the zero row, greedy
        self.inputs[3].fill_(1)
        self.inputs[4].fill_(rows.pad_row)
        self.inputs[5].view(torch.float32).fill_(1.0)
        self.inputs[6].fill_(1)
        self.table, self.generation = rows.dev, rows.generation
        self.hidden = torch.zeros(big, runner.model.args.hidden_size, dtype=runner.dtype, device=dev)
        self.tokens = torch.zeros(big, dtype=torch.int64, device=dev)
        self.graphs: dict[tuple[int, str], torch.cuda.CUDAGraph] = {}
        self.failed: dict[str, str] = {}  # a sampling mode that could not be captured, and why
        self.pool = None

    def fits(self, n: int) -> bool:
        # a table that grew is a new tensor: the graphs read the old one
        return 0 < n <= self.sizes[-1] and self.runner.rows.generation == self.generation

    def size_for(self, n: int) -> int:
        """The captured size a step of ``n`` decodes replays, or 0 when no graph holds it."""
        return next(s for s in self.sizes if s >= n) if self.fits(n) else 0

    def _step(self, size: int, mode: str) -> None:
        """The decode step a graph records, reading ``inputs`` and writing ``hidden`` or ``tokens``."""
        from engine.backends.paged.sampler import SamplingBatch, sample_batched

        r, g = self.runner, self.inputs[:, :size]
        meta = AttentionMetadata(
            slot_mapping=g[2].long(),
            num_decodes=size,
            decode_block_tables=self.table.index_select(0, g[4]),
            decode_context_lens=g[3],
            max_decode_context_len=r.config.max_model_len,
            has_padding=True,
        )
        hidden = r.model(g[0], g[1], ForwardContext(meta, r.kv_caches, r.ops))
        if mode == "hidden":
            self.hidden[:size] = hidden
            return
        logits = r.model.compute_logits(hidden)
        ends = r.rows.end_ids_dev  # banned where a row asks for ignore_eos (field 10; padding rows: 0)
        batch = SamplingBatch(greedy=g[6], temperature=g[5].view(torch.float32), top_k=None, top_p=None, min_p=None,
                              seed_hi=g[7], seed_lo=g[8], draws=g[9], all_greedy=mode == "greedy",
                              ban_eos=g[10] if ends.numel() else None, end_ids=ends if ends.numel() else None)  # fmt: skip
        self.tokens[:size] = sample_batched(logits, batch)

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every size and mode. A sampling mode that fails to capture is left out (its steps replay
        the hidden states and sample eagerly), and the failure is kept in ``failed``; a hidden-state graph
        that fails raises, and the runner decodes eagerly."""
        self.failed = {}
        for size in reversed(self.sizes):
            for mode in MODES:
                if mode in self.failed:
                    continue
                try:
                    self._step(size, mode)  # warm-up: compiles kernels outside the capture
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, self.pool):
                        self._step(size, mode)
                except RuntimeError as exc:
                    if mode == "hidden":
                        raise
                    log.warning("decode graphs that sample (%s) could not be captured: %s", mode, exc)
                    self.failed[mode] = f"{type(exc).__name__}: {exc}"[:500]
                    continue
                if self.pool is None:
                    self.pool = graph.pool()
                self.graphs[(size, mode)] = graph
            torch.cuda.synchronize()
        log.info("captured decode CUDA graphs for batch sizes %s", self.sizes)

    def _load(self, batch: StepBatch) -> int:
        block = batch.graph_inputs
        if block is None:
            raise ValueError("this step was not laid out for a CUDA graph")
        size = block.shape[1]
        self.inputs[:, :size].copy_(block)
        return size

    def replay(self, batch: StepBatch) -> torch.Tensor:
        """Hidden states [num_decodes, hidden] of a decode-only batch laid out for a graph."""
        size = self._load(batch)
        self._replay(size, "hidden")
        return self.hidden[: batch.num_decodes]

    def samples(self, greedy: bool) -> bool:
        """Whether the graphs that sample (``greedy``: greedy only) were captured."""
        return ("greedy" if greedy else "sample") not in self.failed

    def replay_sampled(self, batch: StepBatch, *, greedy: bool) -> torch.Tensor:
        """Sampled tokens [num_decodes] of a decode-only batch whose rows all sample without filters."""
        size = self._load(batch)
        self._replay(size, "greedy" if greedy else "sample")
        return self.tokens[: batch.num_decodes]

    @torch.inference_mode()
    def _replay(self, size: int, mode: str) -> None:
        if self.eager:
            self._step(size, mode)
        else:
            self.graphs[(size, mode)].replay()


__all__ = ["DecodeGraphs", "pad_decode_batch", "MODES"]
