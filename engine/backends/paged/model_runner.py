"""Runs the model for one scheduled step: builds the batch tensors, owns the KV cache,
replays CUDA graphs for decode steps, and returns the logits of the rows to sample."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import torch

from engine.backends.paged.config import EngineConfig
from engine.backends.paged.cuda_graphs import DecodeGraphs
from engine.backends.paged.ops import ForwardContext, ForwardOps, TorchOps
from engine.backends.paged.sampler import RequestSampler, SamplingBatch, sample, sample_batched
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence import Sequence
from engine.backends.paged.sequence_rows import SequenceRows
from engine.backends.paged.step_batch import GRAPH_FIELDS, StepBatch, StepInputs, build_step, sampling_batch
from engine.types import SamplingParams

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
        end_ids: The model's end-of-generation tokens: requests that ban them (ignore_eos) sample batched.
    """

    def __init__(
        self, model, config: EngineConfig, device: torch.device, *, ops: ForwardOps = TorchOps, kv_dtype=None,
        end_ids: tuple[int, ...] | list[int] = (),
    ) -> None:  # fmt: skip
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
        vocab = model.args.vocab_size
        self.rows = SequenceRows(2 * config.max_num_seqs + 8, config.max_blocks_per_seq, device,
                                 end_ids=[e for e in end_ids if 0 <= e < vocab])  # fmt: skip
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

    @torch.inference_mode()
    def warm_up(self, *, always: bool = False) -> None:
        """Run once every kernel variant serving can meet that graph capture did not, so nothing compiles while
        serving: a mixed step of a decode and two chunks over a cached prefix (each prefill tile height), a
        chunk alone, and both sampling paths. Triton specialises on constexprs and on integer arguments equal to
        1 or divisible by 16; what varies between steps here (tile height, the decode's context slices) is
        enumerated, and the rest (table stride, pointer alignment) is the same every step by construction.

        Uses blocks of the cache before anything is stored in it; its rows are released after. The torch ops
        compile nothing: they skip it unless ``always``."""
        if (self.ops is TorchOps and not always) or not self.kv_caches:
            return
        bs = self.config.block_size
        spans = ((33, 32), (64 + 40, 64), (64 + 8, 64))  # (tokens, computed): a decode, chunks of 40 and 8 rows
        need = sum(-(-n // bs) for n, _ in spans)
        if need > self.kv_caches[0][0].shape[0] or any(n > self.config.max_model_len for n, _ in spans):
            log.info("warm-up skipped: the cache or the context is too small for it")
            return
        seqs, first = [], 0
        for i, (n, computed) in enumerate(spans):
            params = SamplingParams(temperature=0.7 if i else 0.0, top_k=5 if i == 2 else 0, seed=i, max_tokens=1)
            sampler = RequestSampler(params, vocab_size=self.model.args.vocab_size, eos_ids=[], device=self.device)
            seq = Sequence([1] * n, params, block_size=bs, owner=SimpleNamespace(sampler=sampler, drafter=None))
            seq.block_table, seq.num_computed_tokens = list(range(first, first + -(-n // bs))), computed
            first += len(seq.block_table)
            seqs.append(seq)
        d, a, b = seqs
        steps = ([ScheduledSeq(d, 1), ScheduledSeq(a, 40), ScheduledSeq(b, 8)], [ScheduledSeq(b, 8)], [ScheduledSeq(d, 1)])
        for scheduled in steps:
            batch = self.prepare(scheduled, sample=True)
            if batch.host_rows is not None:
                self.sample(batch)  # batched: filters and the race
            sample(self.run(batch), [s.seq.owner.sampler for s in batch.sampled],
                   [(s.seq.token_ids, s.seq.num_prompt_tokens) for s in batch.sampled])  # per request
        if self.ops.name == "triton":  # every class of context slices (1, 16, the others), whatever the graphs ran
            from engine.backends.paged.kernels import paged_decode_attention

            k_cache, v_cache = self.kv_caches[0]
            args = self.model.args
            q = torch.zeros(2, args.num_attention_heads, args.dim_head, dtype=self.dtype, device=self.device)
            lens = torch.ones(2, dtype=torch.int32, device=self.device)
            for splits in (1, 2, 16):
                paged_decode_attention(q, k_cache, v_cache, self.rows.dev[:2], lens, args.dim_head**-0.5, splits)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        for seq in seqs:
            self.rows.release(seq)

    # -- one step -----------------------------------------------------------------------------
    def release(self, seq) -> None:
        """``seq`` finished: its row of block tables and sampling parameters is free."""
        self.rows.release(seq)

    def prepare(
        self, scheduled: list[ScheduledSeq] | tuple[ScheduledSeq, ...], *, sample: bool = False, eager: bool = False
    ) -> StepBatch:
        """The step's inputs, staged in one host-to-device copy (see ``step_batch.build_step``)."""
        graphs = self.graphs
        return build_step(scheduled, rows=self.rows, inputs=self.inputs, block_size=self.config.block_size,
                          graph_size=graphs.size_for if graphs is not None else _no_graph, sample=sample,
                          eager=eager)  # fmt: skip

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
        graphs = self.graphs
        if g is not None and graphs is not None and not batch.filtered and graphs.samples(batch.all_greedy):
            return graphs.replay_sampled(batch, greedy=batch.all_greedy)
        return sample_batched(self.run(batch), self.sampling_of(batch))

    def sampling_of(self, batch: StepBatch) -> SamplingBatch:
        """The batched sampling parameters of ``batch`` as tensors, on either layout (a graph step's filters
        are not in its block: they come from the host rows, a step that rarely happens)."""
        rows, g, n = batch.host_rows, batch.graph_inputs, batch.num_decodes
        if batch.sampling is not None:
            return batch.sampling
        if rows is None or g is None or len(batch.sampled) != n:
            raise ValueError("a batched sampling step came without its parameters")
        ban, end_ids = (g[10, :n], self.rows.end_ids_dev) if batch.ban else (None, None)
        if not batch.filtered:
            return SamplingBatch(greedy=g[6, :n], temperature=g[5, :n].view(torch.float32), top_k=None, top_p=None,
                                 min_p=None, seed_hi=g[7, :n], seed_lo=g[8, :n], draws=g[9, :n],
                                 all_greedy=batch.all_greedy, ban_eos=ban, end_ids=end_ids)  # fmt: skip
        extra = torch.from_numpy(self.rows.columns[rows, 5:8].T.copy()).to(self.device)
        return sampling_batch(self.rows, [g[5, :n], g[6, :n], g[7, :n], g[8, :n], g[9, :n], *extra, g[10, :n]], rows,
                              batch)  # fmt: skip

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
