"""Runs the model for one scheduled step: builds the batch tensors, owns the KV cache,
replays CUDA graphs for decode steps, and returns the logits of the rows to sample."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import chain

import torch

from engine.backends.paged.attention import AttentionMetadata
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.cuda_graphs import DecodeGraphs
from engine.backends.paged.ops import ForwardContext, ForwardOps, TorchOps
from engine.backends.paged.scheduler import ScheduledSeq

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

    def stage(self, parts: list[tuple[list[int], tuple[int, ...]]]) -> list[torch.Tensor]:
        """One int32 tensor per (flat values, shape), all from one host-to-device copy."""
        total = sum(len(values) for values, _ in parts)
        if self.event is not None:
            self.event.synchronize()  # the previous step's copy has left the host buffer
        if total > self.host.numel():
            self._allocate(max(total, 2 * self.host.numel()))
        self.host_np[:total] = list(chain.from_iterable(values for values, _ in parts))
        if self.dev is not None:
            self.dev[:total].copy_(self.host[:total], non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
            src = self.dev
        else:
            src = self.host[:total].clone()  # the CPU: a fresh tensor, so earlier batches stay valid
        out, offset = [], 0
        for values, shape in parts:
            out.append(src[offset : offset + len(values)].view(shape))
            offset += len(values)
        return out


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
    def prepare(self, scheduled: list[ScheduledSeq] | tuple[ScheduledSeq, ...]) -> StepBatch:
        bs = self.config.block_size
        # a decode with a draft is a chunk of several rows over its context, computed as a prefill chunk is
        decodes = [s for s in scheduled if s.num_rows == 1]
        prefills = [s for s in scheduled if s.num_rows > 1]
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        sampled: list[ScheduledSeq] = []
        starts, lens, ctxs = [], [], []
        for item in decodes + prefills:
            seq, n = item.seq, item.num_rows
            c = seq.num_computed_tokens
            if n > 1:
                starts.append(len(ids))
                lens.append(n)
                ctxs.append(c + n)
            ids.extend(seq.token_ids[c : c + item.num_tokens])
            ids.extend(item.draft)
            pos.extend(range(c, c + n))
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(c, c + n))
            if item.samples:
                sample_rows.extend(range(len(ids) - 1 - len(item.draft), len(ids)))
                sampled.append(item)
        parts: list[tuple[list[int], tuple[int, ...]]] = [
            (ids, (len(ids),)), (pos, (len(pos),)), (slots, (len(slots),)), (sample_rows, (len(sample_rows),)),
        ]  # fmt: skip
        dl: list[int] = []
        if decodes:
            tables = [d.seq.block_table for d in decodes]
            width = max(map(len, tables))
            parts.append((list(chain.from_iterable(pad_table(tables, width))), (len(decodes), width)))
            dl = [d.seq.num_computed_tokens + 1 for d in decodes]
            parts.append((dl, (len(dl),)))
        if prefills:
            tables = [p.seq.block_table for p in prefills]
            width = max(map(len, tables))
            parts.append((list(chain.from_iterable(pad_table(tables, width))), (len(prefills), width)))
            cu = [starts[0]]
            for n in lens:
                cu.append(cu[-1] + n)
            parts += [(cu, (len(cu),)), (ctxs, (len(ctxs),))]
        views = iter(self.inputs.stage(parts))
        t_ids, t_pos, t_slots, t_rows = next(views), next(views), next(views), next(views)
        # int32 throughout, but slots index the cache with index_copy_ (int64 only) and may pass 2**31 bytes
        meta = AttentionMetadata(slot_mapping=t_slots.long(), num_decodes=len(decodes))
        if decodes:
            meta.decode_block_tables, meta.decode_context_lens = next(views), next(views)
            meta.max_decode_context_len = max(dl)
        if prefills:
            meta.prefill_block_tables = next(views)
            meta.prefill_query_starts, meta.prefill_query_lens, meta.prefill_context_lens = (
                tuple(starts), tuple(lens), tuple(ctxs),
            )  # fmt: skip
            meta.prefill_cu_query_lens, meta.prefill_context_lens_t = next(views), next(views)
        return StepBatch(t_ids, t_pos, meta, t_rows, sampled, len(decodes))

    @torch.inference_mode()
    def run(self, batch: StepBatch) -> torch.Tensor:
        """Logits [num_samples, vocab] (float32) for the sampling rows of ``batch`` (a drafted token's too)."""
        meta = batch.meta
        if self.graphs is not None and meta.num_prefills == 0 and self.graphs.fits(meta.num_decodes):
            hidden = self.graphs.replay(batch)
        else:
            ctx = ForwardContext(meta, self.kv_caches, self.ops)
            hidden = self.model(batch.input_ids, batch.positions, ctx)  # [num_tokens, hidden]
        if batch.sample_rows.numel() == 0:
            return torch.empty(0, self.model.args.vocab_size, device=self.device)
        return self.model.compute_logits(hidden.index_select(0, batch.sample_rows))

    @torch.inference_mode()
    def forward_padded(self, batch: StepBatch, size: int) -> torch.Tensor:
        """A decode-only step padded to ``size`` rows, the shape CUDA graphs replay; runs eagerly.

        Padding rows store nothing (slot -1) and attend to one token of block 0.
        """
        from engine.backends.paged.cuda_graphs import pad_decode_batch

        ids, pos, meta = pad_decode_batch(batch, size, self.config.max_blocks_per_seq)
        hidden = self.model(ids, pos, ForwardContext(meta, self.kv_caches, self.ops))
        return self.model.compute_logits(hidden[: batch.num_decodes].index_select(0, batch.sample_rows))


__all__ = ["ModelRunner", "StepBatch", "StepInputs"]
