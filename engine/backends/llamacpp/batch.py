"""Filling a ``llama_batch``: the one place that writes its rows, for the decode loop, the draft model, the
embedding context and the reranker."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import llama_cpp

# A row: the token, its position, the sequence id it belongs to, and whether llama.cpp gives its output
# (logits, or an embedding in an embedding context).
Row = tuple[int, int, int, bool]


def fill_batch(batch: llama_cpp.llama_batch, rows: Iterable[Row]) -> int:
    """Write ``rows`` into ``batch`` from its first row on and set its length; return that length.

    The batch must hold as many rows (``llama_batch_init``'s ``n_tokens``), each with one sequence id.
    """
    # Each field read of a ctypes structure makes a new pointer object: once per call, not once per row.
    token, pos, n_seq_id, seq_id, logits = batch.token, batch.pos, batch.n_seq_id, batch.seq_id, batch.logits
    n = 0
    for t, p, s, out in rows:
        token[n] = t
        pos[n] = p
        n_seq_id[n] = 1
        seq_id[n][0] = s
        logits[n] = out
        n += 1
    batch.n_tokens = n
    return n


def run_rows(tokens: list[int], start: int, seq_id: int = 0) -> Iterator[Row]:
    """Rows for ``tokens`` at positions from ``start`` in sequence ``seq_id``, every one with its output."""
    return ((t, start + i, seq_id, True) for i, t in enumerate(tokens))


@contextmanager
def scratch_batch(n_rows: int) -> Iterator[llama_cpp.llama_batch]:
    """A batch of ``n_rows`` rows for one call, freed after it."""
    batch = llama_cpp.llama_batch_init(n_rows, 0, 1)
    try:
        yield batch
    finally:
        llama_cpp.llama_batch_free(batch)


__all__ = ["Row", "fill_batch", "run_rows", "scratch_batch"]
