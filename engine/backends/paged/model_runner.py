"""Runs the model for one scheduled step: builds the batch tensors, owns the KV cache,
replays CUDA graphs for decode steps, and returns the logits of the rows to sample."""

from __future__ import annotations

import logging

import torch

from engine.backends.paged.config import EngineConfig
from engine.backends.paged.cuda_graphs import DecodeGraphs
from engine.backends.paged.ops import ForwardContext, ForwardOps, TorchOps
from engine.backends.paged.sampler import sample_batched
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence_rows import SequenceRows
from engine.backends.paged.step_batch import GRAPH_FIELDS, StepBatch, StepInputs, build_step, sampling_batch

log = logging.getLogger(__name__)


def _no_graph(n: int) -> int:
    return 0


class ModelRunner:
    """The model, its KV cache and the operations it runs with, on one device.

    Args:
        model: A loaded model (``models.<family>.Model``) on ``device``.
        config: Engine limits (block size, batch sizes, CUDA graph sizes).
        device: Where the model lives.
        ops: ``TorchOps`` (reference) or ``kernels.TritonOps``.
        kv_dtype: dtype of the KV cache (the model dtype, or float8_e4m3fn).
    """

    def __init__(
        self, model, config: EngineConfig, device: torch.device, *, ops: ForwardOps = TorchOps, kv_dtype=None
    ) -> None:
        self.model = model
        self.config = config
        self.device = device
        self.ops = ops
        self.dtype = model.embed_tokens.weight.dtype
        self.kv_dtype = kv_dtype or self.dtype
        self.kv_caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.graphs: DecodeGraphs | None = None
        self.inputs = StepInputs(device)
        # rows for more sequences than a step holds: a finished one's row is reclaimed if nobody released it
        self.rows = SequenceRows(2 * config.max_num_seqs + 8, config.max_blocks_per_seq, device)
        a = model.args
        self.num_layers, self.num_kv_heads, self.head_dim = a.num_hidden_layers, a.n_kv_heads, a.dim_head

    # -- KV cache -----------------------------------------------------------------------------
    @property
    def bytes_per_block(self) -> int:
        elem = torch.empty((), dtype=self.kv_dtype).element_size()
        return 2 * self.num_layers * self.config.block_size * self.num_kv_heads * self.head_dim * elem

    def allocate_kv_cache(self, num_blocks: int) -> None:
        shape = (num_blocks, self.config.block_size, self.num_kv_heads, self.head_dim)
        self.kv_caches = [
            # zeros, not empty: masked-out positions are still multiplied by 0, and 0 * NaN is NaN
            (torch.zeros(shape, dtype=self.kv_dtype, device=self.device),
             torch.zeros(shape, dtype=self.kv_dtype, device=self.device))
            for _ in range(self.num_layers)
        ]  # fmt: skip

    def capture_cuda_graphs(self) -> None:
        """Record decode steps for the configured batch sizes (CUDA and Triton ops only)."""
        if self.device.type != "cuda" or self.config.enforce_eager or self.ops is TorchOps:
            return
        self.graphs = DecodeGraphs(self)
        self.graphs.capture()

    # -- one step -----------------------------------------------------------------------------
    def release(self, seq) -> None:
        """``seq`` finished: its row of block tables and sampling parameters is free."""
        self.rows.release(seq)

    def prepare(self, scheduled: list[ScheduledSeq] | tuple[ScheduledSeq, ...], *, sample: bool = False) -> StepBatch:
        """The step's inputs, staged in one host-to-device copy (see ``step_batch.build_step``)."""
        graphs = self.graphs
        return build_step(scheduled, rows=self.rows, inputs=self.inputs, block_size=self.config.block_size,
                          graph_size=graphs.size_for if graphs is not None else _no_graph, sample=sample)  # fmt: skip

    @torch.inference_mode()
    def run(self, batch: StepBatch) -> torch.Tensor:
        """Logits [num_samples, vocab] (float32) for the sampling rows of ``batch`` (a drafted token's too)."""
        if batch.graph_inputs is not None and self.graphs is not None:
            hidden = self.graphs.replay(batch)
        else:
            ctx = ForwardContext(batch.meta, self.kv_caches, self.ops)
            hidden = self.model(batch.input_ids, batch.positions, ctx)  # [num_tokens, hidden]
        if batch.sample_rows.numel() == 0:
            return torch.empty(0, self.model.args.vocab_size, device=self.device)
        return self.model.compute_logits(hidden.index_select(0, batch.sample_rows))

    @torch.inference_mode()
    def sample(self, batch: StepBatch) -> torch.Tensor:
        """Tokens [num_samples] (int64, on the device) of a step that carries batched sampling: one graph replay,
        sampling included, for a decode step a graph holds; the forward and ``sample_batched`` otherwise."""
        rows = batch.host_rows
        if rows is None:
            raise ValueError("this step's rows do not all take the batched sampling path")
        g = batch.graph_inputs
        if g is not None and self.graphs is not None and not batch.filtered and len(batch.sampled) == batch.num_decodes:
            return self.graphs.replay_sampled(batch, greedy=batch.all_greedy)
        sb = batch.sampling
        if sb is None:  # a graph step whose rows filter: the graph's hidden states, then the sampler eagerly
            n = batch.num_decodes
            if g is None or len(batch.sampled) != n:
                raise ValueError("a batched sampling step came without its parameters")
            extra = torch.from_numpy(self.rows.columns[rows, 5:].T.copy()).to(self.device)
            sb = sampling_batch(self.rows, [g[5, :n], g[6, :n], g[7, :n], g[8, :n], g[9, :n], *extra], rows, batch)
        return sample_batched(self.run(batch), sb)

    @torch.inference_mode()
    def forward_padded(self, batch: StepBatch, size: int) -> torch.Tensor:
        """A decode-only step padded to ``size`` rows, the shape CUDA graphs replay; runs eagerly.

        Padding rows store nothing (slot -1) and attend to one token of block 0.
        """
        from engine.backends.paged.cuda_graphs import pad_decode_batch

        tables = batch.meta.decode_block_tables
        if tables is None and batch.table_rows is not None:  # a graph step: its rows' tables, gathered
            tables = self.rows.dev.index_select(0, batch.table_rows)
        ids, pos, meta = pad_decode_batch(batch, size, self.rows.max_blocks, tables=tables)
        hidden = self.model(ids, pos, ForwardContext(meta, self.kv_caches, self.ops))
        return self.model.compute_logits(hidden[: batch.num_decodes].index_select(0, batch.sample_rows))


__all__ = ["GRAPH_FIELDS", "ModelRunner", "StepBatch", "StepInputs"]
