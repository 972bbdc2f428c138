"""A step's model inputs, built from the schedule in O(batch) host work and one host-to-device copy.

The block tables and sampling parameters are not rebuilt: they are rows of :class:`SequenceRows`, kept
between steps. Per step the host reads a few numbers of each sequence (its computed tokens, its pending
token, its row), computes slots with numpy from the table rows, and stages everything in one buffer. A
decode-only step that a CUDA graph holds is laid out as the graph reads it (``GRAPH_FIELDS`` by row,
padded to the captured size), so the replay is one copy and one launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np
import torch

from engine.backends.paged.attention import AttentionMetadata
from engine.backends.paged.sampler import SamplingBatch
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence_rows import COLUMNS, SequenceRows, rows_for

# the fields of a graph step's input block, in order; floats travel as their bits
GRAPH_FIELDS = ("ids", "positions", "slots", "context_lens", "table_rows", "temperature", "greedy", "seed_hi",
                "seed_lo", "draws", "ban_eos")  # fmt: skip
_computed, _token_ids = attrgetter("num_computed_tokens"), attrgetter("token_ids")
_ALIGN = 16  # elements: each staged part starts 64-byte aligned, so Triton sees the same pointer alignment


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
    # a decode-only step laid out as a CUDA graph reads it: [GRAPH_FIELDS, size] int32, padded to a captured size
    graph_inputs: torch.Tensor | None = None
    host_rows: np.ndarray | None = None  # when every sampled row samples batched: their rows (host)
    sampling: SamplingBatch | None = None  # ... and their parameters as tensors (eager layout)
    all_greedy: bool = False
    top: bool = False  # some drawing row asks for top-k or top-p
    floor: bool = False  # ... for min-p
    ban: bool = False  # some row bans the end of generation (ignore_eos)

    @property
    def filtered(self) -> bool:
        return self.top or self.floor


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
            if n:
                host[off : off + n] = values
        if self.dev is not None:
            self.dev[:total].copy_(self.host[:total], non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
            src = self.dev
        else:
            src = self.host[:total].clone()  # the CPU: a fresh tensor, so earlier batches stay valid
        return [src[off : off + n].view(shape) for (_, shape), off, n in zip(parts, offsets, sizes, strict=True)]


class Prefills:
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
        picks = [i for i, item in enumerate(items) if item.samples]
        self.sampled = [items[i] for i in picks]
        self.drafted = any(item.draft for item in self.sampled)
        self.sample_table_rows = rows[picks]
        self.sample_rows = np.array([nd + int(ends[i]) - 1 - len(items[i].draft) + j for i in picks
                                     for j in range(1 + len(items[i].draft))], np.int64)  # fmt: skip


def build_step(
    scheduled: list[ScheduledSeq] | tuple[ScheduledSeq, ...], *, rows: SequenceRows, inputs: StepInputs,
    block_size: int, graph_size, sample: bool, eager: bool = False,
) -> StepBatch:  # fmt: skip
    """The step's inputs. ``graph_size(n)``: the captured size a step of ``n`` decodes replays, or 0.

    With ``sample``, a step whose sampled rows all take the batched path (no drafts, bias, penalties, grammar
    or logprobs) carries their rows (and, off the graph, their parameters as tensors). ``eager`` lays out a
    step a graph would hold for an eager forward (its metadata carries block tables)."""
    bs = block_size
    # a decode with a draft is a chunk of several rows over its context, computed as a prefill chunk is
    prefills = [s for s in scheduled if s.num_tokens > 1 or s.draft]
    decodes = [s for s in scheduled if s.num_tokens == 1 and not s.draft] if prefills else list(scheduled)
    nd = len(decodes)
    seqs = [item.seq for item in (decodes + prefills if prefills else decodes)]
    t_rows = rows_for(rows, seqs)
    tables = rows.tables
    dseqs = seqs[:nd] if prefills else seqs
    d_pos = np.fromiter(map(_computed, dseqs), np.int64, nd)
    d_ids = [s.token_ids[s.num_computed_tokens] for s in dseqs]
    d_samples = d_pos + 1 == np.fromiter(map(len, map(_token_ids, dseqs)), np.int64, nd)
    d_rows = t_rows[:nd]
    d_slots = tables[d_rows, d_pos // bs].astype(np.int64) * bs + d_pos % bs
    all_sample = bool(d_samples.all())
    sampled = decodes if all_sample else [d for d, ok in zip(decodes, d_samples.tolist(), strict=True) if ok]
    srows = d_rows if all_sample else d_rows[d_samples]
    sample_rows = np.arange(nd) if all_sample else np.flatnonzero(d_samples)
    pre = Prefills(prefills, t_rows[nd:], tables, bs, nd) if prefills else None
    if pre is not None:
        sampled = sampled + pre.sampled
        srows = np.concatenate([srows, pre.sample_table_rows])
        sample_rows = np.concatenate([sample_rows, pre.sample_rows])
    batched = sample and not (pre is not None and pre.drafted) and bool(rows.batched[srows].all())
    upd_idx, upd_vals = rows.take_updates()
    parts: list[tuple[Any, tuple[int, ...]]] = [(upd_idx, (len(upd_idx),)), (upd_vals, (len(upd_vals),)),
                                                (sample_rows, (len(sample_rows),))]  # fmt: skip
    size = graph_size(nd) if pre is None and all_sample and not eager else 0  # a 1-token chunk mid-prompt: eager (rare)
    if size:
        parts.append((graph_block(rows, d_ids, d_pos, d_slots, d_rows, size), (len(GRAPH_FIELDS), size)))
    else:
        ids = d_ids if pre is None else np.concatenate([np.array(d_ids, np.int64), pre.ids])
        pos = d_pos if pre is None else np.concatenate([d_pos, pre.pos])
        slots = d_slots if pre is None else np.concatenate([d_slots, pre.slots])
        parts += [(ids, (len(ids),)), (pos, (len(pos),)), (slots, (len(slots),)), (t_rows, (len(t_rows),)),
                  (d_pos + 1, (nd,))]  # fmt: skip
        if pre is not None:
            parts += [(pre.cu, (len(pre.cu),)), (pre.ctx, (len(pre.ctx),))]
        if batched:
            parts += [(a, (len(srows),)) for a in rows.sampling_columns(srows).T]
    views = inputs.stage(parts)
    t_idx, t_vals = views[0], views[1]
    if t_idx.numel():  # the block tables' new entries, into the device mirror, before any step reads them
        rows.dev.view(-1)[t_idx.long()] = t_vals
    meta = AttentionMetadata(slot_mapping=views[0], num_decodes=nd)
    if nd:
        meta.max_decode_context_len = int(d_pos.max()) + 1
    if size:
        g = views[3]
        meta.slot_mapping, meta.decode_context_lens = g[2, :nd], g[3, :nd]
        batch = StepBatch(g[0, :nd], g[1, :nd], meta, views[2], sampled, nd, table_rows=g[4, :nd], graph_inputs=g)
    else:
        t_ids, t_pos, t_slots, v_rows, t_dl = views[3:8]
        # int32 throughout, but slots index the cache with index_copy_ (int64 only) and may pass 2**31 bytes
        meta.slot_mapping = t_slots.long()
        if nd:
            meta.decode_block_tables = rows.dev.index_select(0, v_rows[:nd])
            meta.decode_context_lens = t_dl
        if pre is not None:
            meta.prefill_block_tables = rows.dev.index_select(0, v_rows[nd:])
            meta.prefill_query_starts, meta.prefill_query_lens, meta.prefill_context_lens = pre.starts, pre.lens, pre.ctxs
            meta.prefill_cu_query_lens, meta.prefill_context_lens_t = views[8], views[9]
        batch = StepBatch(t_ids, t_pos, meta, views[2], sampled, nd, table_rows=v_rows[:nd])
    if batched:
        drawing = ~rows.greedy[srows]
        batch.host_rows, batch.all_greedy = srows, not drawing.any()
        batch.top = bool(((rows.top_k[srows] > 0) | (rows.top_p[srows] < 1.0))[drawing].any())
        batch.floor = bool((rows.min_p[srows] > 0)[drawing].any())
        batch.ban = bool(rows.ban_eos[srows].any())
        if not size:
            batch.sampling = sampling_batch(rows, views[-len(COLUMNS):], srows, batch)
    return batch


def graph_block(rows: SequenceRows, ids, pos, slots, table_rows, size: int) -> np.ndarray:
    """A decode-only step as the graph reads it, padded to ``size`` rows: padding rows store nothing (slot
    -1), attend to one token of the all-zero row and sample greedily."""
    n = len(ids)
    block = np.empty((len(GRAPH_FIELDS), size), np.int32)
    block[0, :n], block[1, :n], block[2, :n], block[3, :n], block[4, :n] = ids, pos, slots, pos + 1, table_rows
    block[:5, n:] = ((0,), (0,), (-1,), (1,), (rows.pad_row,))
    block[5:10, :n] = rows.columns[table_rows, :5].T
    block[5:10, n:] = rows.columns[rows.pad_row, :5, None]
    block[10, :n], block[10, n:] = rows.columns[table_rows, 8], 0
    return block.reshape(-1)


def sampling_batch(rows: SequenceRows, views: list[torch.Tensor], srows: np.ndarray, batch: StepBatch) -> SamplingBatch:
    """The sampled rows' parameters as tensors: staged columns (eager layout), or the graph block's rows."""
    temps, greedy, hi, lo, draws, top_k, top_p, min_p, ban = views
    return SamplingBatch(greedy=greedy, temperature=temps.view(torch.float32), top_k=top_k, top_p=top_p.view(torch.float32),
                         min_p=min_p.view(torch.float32), seed_hi=hi, seed_lo=lo, draws=draws,
                         all_greedy=batch.all_greedy, top=batch.top, floor=batch.floor,
                         ban_eos=ban if batch.ban else None, end_ids=rows.end_ids_dev if batch.ban else None)  # fmt: skip


__all__ = ["GRAPH_FIELDS", "StepBatch", "StepInputs", "build_step", "sampling_batch"]
