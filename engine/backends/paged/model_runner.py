"""Runs the model for one scheduled step: builds the batch tensors, owns the KV cache,
replays CUDA graphs for decode steps, and returns the logits of the rows to sample."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.backends.paged.attention import AttentionMetadata
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.cuda_graphs import DecodeGraphs
from engine.backends.paged.ops import ForwardContext, ForwardOps, TorchOps
from engine.backends.paged.sampler import SamplingBatch, sample_batched
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence_rows import SequenceRows, rows_for

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StepBatch:
    """One step's model inputs. Rows: decodes first, then prefill chunks."""

    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens]
    meta: AttentionMetadata
    # [num_samples]: the row of each sampling sequence's last token, then those of its drafted tokens
    sample_rows: torch.Tensor
    sampled: list[ScheduledSeq]  # the sequences whose next token comes from this step, in row order
    num_decodes: int
    table_rows: torch.Tensor | None = None  # [num_decodes] int32: the decode rows' rows in the block tables
    sampling: SamplingBatch | None = None  # the batched path's parameters, when every sampled row can take it
    # a decode-only step laid out as a CUDA graph reads it: [GRAPH_FIELDS, size] int32, padded to a captured size
    graph_inputs: torch.Tensor | None = None
    host_rows: np.ndarray | None = None  # the sampled sequences' rows (host), to count their draws


# the fields of a graph step's input block, in order; floats travel as their bits
GRAPH_FIELDS = ("ids", "positions", "slots", "context_lens", "table_rows", "temperature", "greedy", "seed_hi",
                "seed_lo", "draws")  # fmt: skip
_ALIGN = 16  # elements: each staged part starts 64-byte aligned, so Triton sees the same pointer alignment


def pad_table(rows: list[list[int]], width: int) -> list[list[int]]:
    return [r + [0] * (width - len(r)) for r in rows]


class StepInputs:
    """A step's integer inputs staged in one persistent host buffer (pinned on CUDA), copied to the
    device in one transfer per step, then handed out as views.

    On CUDA the device buffer is persistent too: a step's tensors are valid until the next
    ``stage``, which waits for the previous transfer before it rewrites the host buffer.
    """

    def __init__(self, device: torch.device, capacity: int = 1 << 15) -> None:
        self.device = device
        self.event = None
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        cuda = self.device.type == "cuda"
        self.host = torch.empty(capacity, dtype=torch.int32, pin_memory=cuda)
        self.host_np = self.host.numpy()
        self.dev = torch.empty(capacity, dtype=torch.int32, device=self.device) if cuda else None

    def stage(self, parts: list[tuple[Any, tuple[int, ...]]]) -> list[torch.Tensor]:
        """One int32 tensor per (flat values, shape), all from one host-to-device copy. Values are lists or
        numpy arrays (float32 ones travel as their bits: view the tensor as float32)."""
        sizes = [len(values) for values, _ in parts]
        offsets, total = [], 0
        for n in sizes:
            offsets.append(total)
            total += -(-n // _ALIGN) * _ALIGN
        if self.event is not None:
            self.event.synchronize()  # the previous step's copy has left the host buffer
        if total > self.host.numel():
            self._allocate(max(total, 2 * self.host.numel()))
        host = self.host_np
        for (values, _), off, n in zip(parts, offsets, sizes, strict=True):
            if isinstance(values, np.ndarray) and values.dtype.itemsize == 4 and values.dtype != np.int32:
                values = values.view(np.int32)
            host[off : off + n] = values
        if self.dev is not None:
            self.dev[:total].copy_(self.host[:total], non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
            src = self.dev
        else:
            src = self.host[:total].clone()  # the CPU: a fresh tensor, so earlier batches stay valid
        return [src[off : off + n].view(shape) for (_, shape), off, n in zip(parts, offsets, sizes, strict=True)]


class _Prefills:
    """The prefill chunks of a step (a drafted decode is one): their tokens, positions and slots, vectorised
    over the tokens; the Python loop is over the chunks only."""

    def __init__(self, items: list[ScheduledSeq], rows: np.ndarray, tables: np.ndarray, bs: int, nd: int) -> None:
        ids: list[int] = []
        lens, ctxs = [], []
        for item in items:
            seq, c = item.seq, item.seq.num_computed_tokens
            ids.extend(seq.token_ids[c : c + item.num_tokens])
            ids.extend(item.draft)
            lens.append(item.num_rows)
            ctxs.append(c + item.num_rows)
        lens_a, ctx_a = np.array(lens, np.int64), np.array(ctxs, np.int64)
        ends = np.cumsum(lens_a)
        begins = ends - lens_a
        self.ids = np.array(ids, np.int64)
        # each chunk's positions run from its computed tokens to its context length
        self.pos = np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(begins - (ctx_a - lens_a), lens_a)
        self.slots = tables[np.repeat(rows, lens_a), self.pos // bs].astype(np.int64) * bs + self.pos % bs
        self.starts, self.lens, self.ctxs = tuple((nd + begins).tolist()), tuple(lens), tuple(ctxs)
        self.cu = np.concatenate([[nd], nd + ends])
        self.ctx = ctx_a
        self.sampled = [item for item in items if item.samples]
        picks = [i for i, item in enumerate(items) if item.samples]
        self.sample_table_rows = rows[picks]
        self.sample_rows = np.array([nd + e - 1 - len(items[i].draft) + j for i in picks for e in (int(ends[i]),)
                                     for j in range(1 + len(items[i].draft))], np.int64)  # fmt: skip


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
        """The step's inputs, staged in one host-to-device copy. With ``sample``, a step whose sampled rows all
        take the batched path (no drafts, bias, penalties, grammar or logprobs) carries their parameters."""
        bs = self.config.block_size
        # a decode with a draft is a chunk of several rows over its context, computed as a prefill chunk is
        decodes = [s for s in scheduled if s.num_rows == 1]
        prefills = [s for s in scheduled if s.num_rows > 1]
        nd = len(decodes)
        items = decodes + prefills if prefills else decodes
        seqs = [item.seq for item in items]
        rows = rows_for(self.rows, seqs)
        tables = self.rows.tables
        d_pos = np.fromiter((s.num_computed_tokens for s in seqs[:nd]), np.int64, nd)
        d_ids = np.fromiter((s.token_ids[c] for s, c in zip(seqs[:nd], d_pos.tolist(), strict=True)), np.int64, nd)
        d_samples = d_pos + 1 == np.fromiter((len(s.token_ids) for s in seqs[:nd]), np.int64, nd)
        d_rows = rows[:nd]
        d_slots = tables[d_rows, d_pos // bs].astype(np.int64) * bs + d_pos % bs
        all_sample = bool(d_samples.all())
        sampled = list(decodes) if all_sample else [d for d, ok in zip(decodes, d_samples.tolist(), strict=True) if ok]
        s_rows = [d_rows if all_sample else d_rows[d_samples]]
        sample_rows = [np.arange(nd) if all_sample else np.flatnonzero(d_samples)]
        pre = _Prefills(prefills, rows[nd:], tables, bs, nd) if prefills else None
        if pre is not None:
            sampled += pre.sampled
            s_rows.append(pre.sample_table_rows)
            sample_rows.append(pre.sample_rows)
        srows = np.concatenate(s_rows) if pre is not None else s_rows[0]
        batched = sample and all(not item.draft for item in sampled) and bool(self.rows.batched[srows].all())
        upd_idx, upd_vals = self.rows.take_updates()
        parts: list[tuple[Any, tuple[int, ...]]] = [(upd_idx, (len(upd_idx),)), (upd_vals, (len(upd_vals),))]
        graph_size = self.graphs.size_for(nd) if self.graphs is not None and pre is None else 0
        if graph_size:
            parts.append((self._graph_block(d_ids, d_pos, d_slots, d_rows, graph_size), (len(GRAPH_FIELDS), graph_size)))
        else:
            ids = d_ids if pre is None else np.concatenate([d_ids, pre.ids])
            pos = d_pos if pre is None else np.concatenate([d_pos, pre.pos])
            slots = d_slots if pre is None else np.concatenate([d_slots, pre.slots])
            parts += [(ids, (len(ids),)), (pos, (len(pos),)), (slots, (len(slots),)), (rows, (len(rows),)),
                      (d_pos + 1, (nd,))]  # fmt: skip
            if pre is not None:
                parts += [(pre.cu, (len(pre.cu),)), (pre.ctx, (len(pre.ctx),))]
        sr = np.concatenate(sample_rows) if pre is not None else sample_rows[0]
        parts.append((sr, (len(sr),)))
        r = self.rows
        if batched and not graph_size:
            parts += [(a[srows], (len(srows),)) for a in (r.greedy.astype(np.int32), r.temperature, r.top_k, r.top_p, r.min_p)]
            parts += [(k, (len(srows),)) for k in r.keys(srows)]
        views = self.inputs.stage(parts)
        t_idx, t_vals = views[0], views[1]
        if t_idx.numel():  # the block tables' new entries, into the device mirror, before any step reads them
            r.dev.view(-1)[t_idx.long()] = t_vals
        meta = AttentionMetadata(slot_mapping=views[2], num_decodes=nd)  # replaced below off the graph path
        if graph_size:
            g = views[2]
            batch = StepBatch(g[0, :nd], g[1, :nd], meta, views[3], sampled, nd, table_rows=g[4, :nd], graph_inputs=g)
            meta.slot_mapping, meta.decode_context_lens = g[2, :nd], g[3, :nd]
            meta.max_decode_context_len = int(d_pos.max()) + 1
        else:
            t_ids, t_pos, t_slots, t_rows, t_dl = views[2:7]
            # int32 throughout, but slots index the cache with index_copy_ (int64 only) and may pass 2**31 bytes
            meta.slot_mapping = t_slots.long()
            if nd:
                meta.decode_block_tables = r.dev.index_select(0, t_rows[:nd])
                meta.decode_context_lens = t_dl
                meta.max_decode_context_len = int(d_pos.max()) + 1
            if pre is not None:
                meta.prefill_block_tables = r.dev.index_select(0, t_rows[nd:])
                meta.prefill_query_starts, meta.prefill_query_lens, meta.prefill_context_lens = (
                    pre.starts, pre.lens, pre.ctxs,
                )  # fmt: skip
                meta.prefill_cu_query_lens, meta.prefill_context_lens_t = views[7], views[8]
            batch = StepBatch(t_ids, t_pos, meta, views[9 if pre is not None else 7], sampled, nd, table_rows=t_rows[:nd])
        if batched:
            batch.host_rows = srows
            batch.sampling = self._sampling(views, srows, graph_size, nd)
        return batch

    def _graph_block(self, ids, pos, slots, rows, size: int) -> np.ndarray:
        """A decode-only step as the graph reads it, padded to ``size`` rows: padding rows store nothing (slot
        -1), attend to one token of the all-zero row and sample greedily."""
        n, r = len(ids), self.rows
        block = np.zeros((len(GRAPH_FIELDS), size), np.int32)
        block[0, :n], block[1, :n], block[2, :n], block[3, :n], block[4, :n] = ids, pos, slots, pos + 1, rows
        block[2, n:], block[3, n:], block[4, n:] = -1, 1, r.pad_row
        padded = np.full(size, r.pad_row, np.int32)
        padded[:n] = rows
        block[5], block[6] = r.temperature[padded].view(np.int32), r.greedy[padded]
        block[7], block[8], block[9] = r.keys(padded)
        return block.reshape(-1)

    def _sampling(self, views: list[torch.Tensor], srows: np.ndarray, graph_size: int, nd: int) -> SamplingBatch:
        r = self.rows
        drawing = ~r.greedy[srows]
        top = bool(((r.top_k[srows] > 0) | (r.top_p[srows] < 1.0))[drawing].any())
        floor = bool((r.min_p[srows] > 0)[drawing].any())
        if graph_size:
            g = views[2]
            greedy, temps, top_k, top_p, min_p = g[6, :nd], g[5, :nd].view(torch.float32), None, None, None
            hi, lo, draws = g[7, :nd], g[8, :nd], g[9, :nd]
            if top or floor:  # the graph has no filters: this step samples eagerly, from per-row tensors
                k = torch.from_numpy(r.top_k[srows]).to(self.device)
                top_k, top_p, min_p = k, torch.from_numpy(r.top_p[srows]).to(self.device), torch.from_numpy(r.min_p[srows]).to(self.device)
        else:
            greedy, temps, top_k, top_p, min_p, hi, lo, draws = views[-8:]
            temps, top_p, min_p = temps.view(torch.float32), top_p.view(torch.float32), min_p.view(torch.float32)
        return SamplingBatch(greedy=greedy, temperature=temps, top_k=top_k, top_p=top_p, min_p=min_p, seed_hi=hi,
                             seed_lo=lo, draws=draws, all_greedy=not drawing.any(), top=top, floor=floor)  # fmt: skip

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
        sb = batch.sampling
        if sb is None:
            raise ValueError("this step's rows do not all take the batched sampling path")
        n = batch.num_decodes
        if batch.graph_inputs is not None and self.graphs is not None and not (sb.top or sb.floor) and len(batch.sampled) == n:
            return self.graphs.replay_sampled(batch, greedy=sb.all_greedy)
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


__all__ = ["ModelRunner", "StepBatch", "StepInputs"]
