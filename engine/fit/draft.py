"""The memory of a draft model for speculative decoding (``--speculative draft:MODEL``): a second GGUF loaded in
the target's worker, with a llama.cpp context of its own (engine/backends/llamacpp/draft_model.py).

The draft's context holds one sequence per slot of the target's loop, each of the target's context length, in a
16-bit KV cache; it computes prompts in micro-batches of :data:`DRAFT_BLOCK` tokens. With any of the target's
layers on a GPU every layer of the draft goes to the (first) GPU, its token embeddings staying in RAM as
llama.cpp keeps them; otherwise all of it is in RAM. What it adds to a load:

- weights: the file's tensors (a CPU load maps the file; every page is read at the first prompt);
- KV cache: ``n_ctx x n_seq`` tokens of every layer, f16;
- compute buffer: what the micro-batch's graph holds at its peak. The draft asks for one row of logits per call
  (the last token of a catch-up block, or a drafted token), and llama.cpp computes the output head for those
  rows only, so the buffer is the residual stream and feed-forward activations of the block's tokens plus the
  logits of one row per sequence, not :func:`engine.fit.memory.compute_buffer_bytes`' logits of every token;
- output buffer: the logits of one row per sequence, kept in RAM;
- llama.cpp's bookkeeping for a second model (its vocabulary, ggml contexts).

Measured with benchmarks/fit_draft.py (a model drafting for itself, served plain and with the draft; docs/fit.md):
the starter's draft within -4% (about 7 MiB under, whatever the context and slots), a Qwen2.5-0.5B-shaped one
within +1%. The model's own compute buffer formula (the logits of every token of a block) would have counted
45 MB more for the starter and 140 MB more for Qwen's vocabulary, 25-30% over what the worker takes.

A draft whose vocabulary is not the model's is refused by the backend, and left out of the plan by the same rule
(:func:`draft_vocabulary_mismatch`, from both files' headers). Known limit: on a GPU the draft is counted on the first
one, though with several GPUs llama.cpp spreads it over them by their free memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from engine.fit.facts import ModelFacts
from engine.fit.memory import (
    ZERO,
    MemoryBreakdown,
    kv_cache_bytes,
    llamacpp_model_bytes,
    output_buffer_bytes,
)

if TYPE_CHECKING:
    from engine.catalog.gguf_header import GGUFVocabulary

# The draft's micro-batch: the most prompt tokens it computes in one call (draft_model.CATCHUP_BLOCK is this).
DRAFT_BLOCK = 256
DRAFT_KV_TYPE = "f16"


def draft_vocabulary_mismatch(model: Path, draft: Path) -> str | None:
    """Why the draft model at ``draft`` cannot draft for the model at ``model``: how its vocabulary differs (a
    drafted token id must mean the same text to both), or None when it can.

    Raises:
        ValueError: either file's vocabulary cannot be read.
    """
    from engine.catalog.gguf_header import vocabulary_mismatch

    return vocabulary_mismatch(_vocabulary(model), _vocabulary(draft))


def _vocabulary(path: Path) -> GGUFVocabulary:
    stat = os.stat(path)
    return _vocabulary_of(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)  # a load reads both files up to three times (sized, planned, checked by the backend)
def _vocabulary_of(path: str, _mtime_ns: int, _size: int) -> GGUFVocabulary:
    from engine.catalog.gguf_header import read_gguf_vocabulary

    return read_gguf_vocabulary(Path(path))


def draft_compute_bytes(draft: ModelFacts, *, n_seq: int, n_ubatch: int = DRAFT_BLOCK) -> int:
    """The draft's compute buffer at its peak: a block's residual stream and feed-forward activations (f32),
    and the logits of the rows it asks for (one per sequence at most)."""
    per_token = 3 * draft.feed_forward + 2 * draft.embedding
    return int(4 * n_ubatch * per_token + 4 * draft.vocab * n_seq)


@dataclass(frozen=True, slots=True)
class DraftMemory:
    """Where a draft model's memory goes: on the target's first GPU (``device``) and in RAM (``host``)."""

    device: MemoryBreakdown
    host: MemoryBreakdown

    @property
    def total(self) -> int:
        return self.device.total + self.host.total


def draft_memory(draft: ModelFacts, *, n_ctx: int, n_seq: int, on_gpu: bool) -> DraftMemory:
    """What the draft ``draft`` takes beside a target of ``n_seq`` slots of ``n_ctx`` tokens.

    Args:
        draft: The draft model's facts.
        n_ctx: Context length of each slot (the draft's sequences are as long).
        n_seq: Slots of the target's loop (one draft sequence each).
        on_gpu: The target has layers on a GPU, so the draft goes there whole (its embeddings aside).
    """
    kv = kv_cache_bytes(draft, n_ctx=n_ctx, n_seq=n_seq, kv_type=DRAFT_KV_TYPE)
    compute = draft_compute_bytes(draft, n_seq=n_seq)
    output = output_buffer_bytes(draft, n_outputs=n_seq)
    runtime = llamacpp_model_bytes(draft)
    layers = sum(draft.layer_weights()) + draft.output_bytes
    if not on_gpu:
        return DraftMemory(ZERO, MemoryBreakdown(draft.input_bytes + layers, kv, compute + output, runtime))
    # the host side of a fully offloaded graph: the embeddings' rows of a block, fetched in RAM and copied over
    host_compute = 4 * DRAFT_BLOCK * draft.embedding * 2
    return DraftMemory(
        MemoryBreakdown(layers, kv, compute, 0),
        MemoryBreakdown(draft.input_bytes, 0, host_compute + output, runtime),
    )


__all__ = ["DRAFT_BLOCK", "DraftMemory", "draft_compute_bytes", "draft_memory", "draft_vocabulary_mismatch"]
