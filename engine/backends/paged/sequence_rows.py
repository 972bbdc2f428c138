"""Each sequence's row in persistent arrays: its block table and its sampling parameters.

A sequence takes a row the first time a step holds it and keeps it until it finishes. Its block table is
copied into the row once, and afterwards only the blocks it gains are written (a new list, after an
admission, a preemption or a trimmed draft, is written whole), so preparing a step costs O(batch) and
never O(batch x blocks). On CUDA the table has a device mirror: the writes of a step travel with the
step's inputs and are applied by one scatter, and a step's block tables are one gather of its rows.

Row ``capacity`` is the padding row: all zeros, greedy, temperature 1.
"""

from __future__ import annotations

from itertools import count
from operator import attrgetter

import numpy as np
import torch

from engine.backends.paged.sequence import Sequence, SequenceStatus

_MASK32 = 0xFFFFFFFF
_seq_id, _block_table = attrgetter("seq_id"), attrgetter("block_table")
# the sampling columns a step stages: temperature (float32 bits), greedy, the seed's halves, the draw count
# (its low 32 bits), top-k, top-p and min-p (float32 bits), and 1 where the end of generation is banned
COLUMNS = ("temperature", "greedy", "seed_hi", "seed_lo", "draws", "top_k", "top_p", "min_p", "ban_eos")


class SequenceRows:
    """Rows of block tables and sampling parameters, kept between steps.

    Args:
        capacity: Rows for sequences (more than the most sequences of a step: finished ones are reclaimed).
        max_blocks: Width of a block table row (the longest sequence's blocks).
        device: Where the block-table mirror lives.
        mirror: Keep a separate mirror of the table, updated by the writes a step stages (default: on CUDA;
            on the CPU the host table is read directly, unless a test asks for the CUDA path's bookkeeping).
        end_ids: The model's end-of-generation tokens. A request that bans them (ignore_eos) samples on the
            batched path when its banned tokens are these; without them it takes its request's sampler.
    """

    def __init__(
        self, capacity: int, max_blocks: int, device: torch.device, *, mirror: bool | None = None,
        end_ids: tuple[int, ...] | list[int] = (),
    ) -> None:  # fmt: skip
        self.device = device
        self.mirror = device.type == "cuda" if mirror is None else mirror
        self.end_ids = tuple(sorted(set(end_ids)))
        self.end_ids_dev = torch.tensor(self.end_ids, dtype=torch.int64, device=device)
        # sequences sampled batched whose grammar waits for a tool call to open (each token is shown to its watch)
        self.watching: set[int] = set()
        # sequences whose thinking budget may still force a token: they sample one by one until it is settled
        self.budgeted: set[int] = set()
        self._allocate(capacity, max_blocks)

    def _allocate(self, capacity: int, max_blocks: int) -> None:
        self.capacity, self.max_blocks = capacity, max_blocks
        n = capacity + 1
        self.tables = np.zeros((n, max_blocks), np.int32)
        self.temperature = np.ones(n, np.float32)
        self.greedy = np.ones(n, np.bool_)
        self.top_k = np.zeros(n, np.int32)  # 0: no top-k
        self.top_p = np.ones(n, np.float32)
        self.min_p = np.zeros(n, np.float32)
        self.draws = np.zeros(n, np.int64)  # the draw count of a row sampled on the batched path
        self.batched = np.zeros(n, np.bool_)  # no bias, penalties, grammar or logprobs: batched sampling
        self.ban_eos = np.zeros(n, np.bool_)  # ignore_eos: the end of generation is never drawn
        # what a step stages for batched sampling, as int32 (floats as their bits), one gather per step
        self.columns = np.zeros((n, len(COLUMNS)), np.int32)
        self.columns[:, 0] = np.float32(1.0).view(np.int32)
        self.columns[:, 1] = 1
        self.columns[:, 6] = np.float32(1.0).view(np.int32)
        self._row: dict[int, int] = {}
        self._seq: list[Sequence | None] = [None] * n
        self._list: list[list[int] | None] = [None] * n  # the block-table list object a row copies
        self._filled = [0] * n
        self._free = list(range(capacity - 1, -1, -1))
        self._updates: list[tuple[int, int, int]] = []  # (row, first column, end column) to mirror
        self.generation = getattr(self, "generation", -1) + 1  # a new table: captured graphs hold the old one
        if self.mirror:
            self.dev = torch.zeros(n, max_blocks, dtype=torch.int32, device=self.device)
        else:
            self.dev = torch.from_numpy(self.tables)  # the same memory: nothing to mirror

    @property
    def pad_row(self) -> int:
        return self.capacity

    def rows_for(self, seqs: list[Sequence]) -> np.ndarray:
        """Each sequence's row (int32 [len(seqs)]), its block table brought up to date."""
        if len(seqs) > self.capacity:
            self._allocate(2 * len(seqs), self.max_blocks)
        row_of, lists, filled = self._row, self._list, self._filled
        rs = list(map(row_of.get, map(_seq_id, seqs)))
        tables = list(map(_block_table, seqs))
        # a row whose sequence is new, whose table is a new list, or whose table grew: the common step has none
        for i, r, table in [x for x in zip(count(), rs, tables) if x[1] is None or x[2] is not lists[x[1]]
                            or len(x[2]) > filled[x[1]]]:  # fmt: skip
            if r is None:
                r = rs[i] = self._assign(seqs[i], seqs)
            if table is not lists[r]:
                self._write(r, table, 0)
                lists[r] = table
            else:
                self._write(r, table, filled[r])
        return np.array(rs, np.int32)

    def constrain(self, seq: Sequence) -> None:
        """``seq``'s grammar holds from now on (a tool call opened): it samples with its request's sampler, which
        takes the draw count its row kept."""
        r = self._row.get(seq.seq_id)
        self.watching.discard(seq.seq_id)
        if r is not None and self.batched[r]:
            seq.owner.sampler.draws = int(self.draws[r])
            self.batched[r] = False

    def settle(self, seq: Sequence) -> None:
        """``seq``'s thinking budget forces nothing more (its thinking closed, or the answer opened none): its row
        samples as its other parameters allow from the next step on, with the draw count its sampler kept."""
        self.budgeted.discard(seq.seq_id)
        r = self._row.get(seq.seq_id)
        if r is not None:
            self._set_sampling(r, seq)

    def release(self, seq: Sequence) -> None:
        """Free ``seq``'s row (it finished or was cancelled)."""
        self.watching.discard(seq.seq_id)
        self.budgeted.discard(seq.seq_id)
        r = self._row.pop(seq.seq_id, None)
        if r is not None:
            sampler = getattr(seq.owner, "sampler", None)
            if sampler is not None and self.batched[r]:  # a preempted sequence takes its count to its next row
                sampler.draws = int(self.draws[r])
            self._seq[r] = self._list[r] = None
            self._free.append(r)

    def take_updates(self) -> tuple[np.ndarray, np.ndarray]:
        """The block-table writes since the last call, as (flat index, block id) for the device mirror."""
        if not self._updates or not self.mirror:
            self._updates.clear()
            return np.empty(0, np.int32), np.empty(0, np.int32)
        w = self.max_blocks
        idx = np.concatenate([np.arange(r * w + a, r * w + b, dtype=np.int32) for r, a, b in self._updates])
        vals = np.concatenate([self.tables[r, a:b] for r, a, b in self._updates])
        self._updates.clear()
        return idx, vals

    def sampling_columns(self, rows: np.ndarray) -> np.ndarray:
        """``COLUMNS`` of ``rows``: int32 [len(rows), len(COLUMNS)]."""
        return self.columns[rows]

    def count_draws(self, rows: np.ndarray) -> None:
        """A batched draw was made for ``rows``: greedy rows draw nothing."""
        self.draws[rows] += ~self.greedy[rows]  # a step's rows are distinct sequences
        self._draws_column(rows)

    def _draws_column(self, rows: np.ndarray) -> None:
        self.columns[rows, 4] = (self.draws[rows] & _MASK32).astype(np.uint32).view(np.int32)

    def sync_draws_to(self, seqs: list[Sequence], rows: np.ndarray) -> None:
        """Before a per-request sampling step: the samplers take the counts the batched path kept."""
        for seq, r in zip(seqs, rows.tolist(), strict=True):
            seq.owner.sampler.draws = int(self.draws[r])

    def sync_draws_from(self, seqs: list[Sequence], rows: np.ndarray) -> None:
        for seq, r in zip(seqs, rows.tolist(), strict=True):
            self.draws[r] = seq.owner.sampler.draws
        self._draws_column(rows)

    # -- internals ----------------------------------------------------------------------------
    def _assign(self, seq: Sequence, batch: list[Sequence]) -> int:
        if not self._free:
            self._reclaim({s.seq_id for s in batch})
        r = self._free.pop()
        self._row[seq.seq_id] = r
        self._seq[r], self._list[r], self._filled[r] = seq, None, 0
        self._set_sampling(r, seq)
        return r

    def _reclaim(self, keep: set[int]) -> None:
        """Rows of sequences that finished first; if none did, of every sequence not in this step (a later
        step writes their tables again)."""
        done = [s for s in self._seq if s is not None and s.status is SequenceStatus.FINISHED and s.seq_id not in keep]
        for s in done or [s for s in self._seq if s is not None and s.seq_id not in keep]:
            self.release(s)

    def _write(self, r: int, table: list[int], start: int) -> None:
        end = len(table)
        if end > self.max_blocks:  # a sequence longer than the engine's limit (a scratch step): wider rows
            self._allocate(self.capacity, max(end, 2 * self.max_blocks))
            raise _Regrown
        self.tables[r, start:end] = table[start:]
        self._filled[r] = end
        if end > start and self.mirror:
            self._updates.append((r, start, end))

    def _set_sampling(self, r: int, seq: Sequence) -> None:
        sampler = getattr(seq.owner, "sampler", None)
        p = sampler.params if sampler is not None else seq.params
        self.greedy[r] = p.greedy
        self.temperature[r] = 1.0 if p.greedy else p.temperature
        self.top_k[r], self.top_p[r], self.min_p[r] = p.top_k, p.top_p, p.min_p
        seed, draws = (sampler.seed, sampler.draws) if sampler is not None else (0, 0)
        self.draws[r] = draws
        self.columns[r] = (
            np.float32(self.temperature[r]).view(np.int32), p.greedy, np.uint32((seed >> 32) & _MASK32).view(np.int32),
            np.uint32(seed & _MASK32).view(np.int32), np.uint32(draws & _MASK32).view(np.int32), p.top_k,
            np.float32(p.top_p).view(np.int32), np.float32(p.min_p).view(np.int32), 0,
        )  # fmt: skip
        self.ban_eos[r] = False
        if sampler is None:
            self.batched[r] = False
            return
        banned = sampler.banned
        self.ban_eos[r] = self.columns[r, 8] = bool(banned)
        matcher = sampler.matcher  # one waiting for a tool call to open masks nothing yet
        thinking = sampler.thinking is not None and sampler.thinking.pending
        if thinking:
            self.budgeted.add(seq.seq_id)
        self.batched[r] = not (sampler.bias or sampler.has_penalties or (matcher is not None and matcher.active)
                               or p.logprobs is not None or (banned and banned != self.end_ids) or sampler.held_ends
                               or thinking)  # fmt: skip
        if matcher is not None and not matcher.active and self.batched[r]:
            self.watching.add(seq.seq_id)


class _Regrown(Exception):
    """The table was reallocated wider mid-step: the caller starts the step's rows again."""


def rows_for(rows: SequenceRows, seqs: list[Sequence]) -> np.ndarray:
    """``rows.rows_for(seqs)``, once more if the table had to grow for one of them."""
    try:
        return rows.rows_for(seqs)
    except _Regrown:
        return rows.rows_for(seqs)


__all__ = ["COLUMNS", "SequenceRows", "rows_for"]
