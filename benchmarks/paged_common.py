"""Shared by the paged-engine benchmarks: the starter model on the paged engine and in transformers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_paged(*, n_ctx: int = 2048, max_num_seqs: int = 32, blocks: int = 2048, budget: int = 512):
    """The starter model on Hearth's paged engine (CPU, float32)."""
    from engine.backends.base import LoadOptions, ModelSpec
    from engine.backends.paged import PagedBackend
    from engine.starter import starter_model_path

    backend = PagedBackend()
    extra = {"num_kv_blocks": blocks, "max_num_batched_tokens": budget}
    backend.load(ModelSpec("starter", starter_model_path()), LoadOptions(n_ctx=n_ctx, n_seq_max=max_num_seqs, extra=extra))
    return backend


def load_transformers():
    """The same GGUF in transformers (dequantized to float32), the reference side."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.starter import starter_model_path

    path = starter_model_path()
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()


def stream_times(stream) -> tuple[float, float, int]:
    """Drain a paged stream: (time to first token, time of last token, tokens), from the call's start."""
    t0 = time.perf_counter()
    first = last = None
    n = 0
    for chunk in stream:
        if chunk.token_ids:
            now = time.perf_counter()
            first = first or now
            last = now
            n += len(chunk.token_ids)
    return first - t0, last - t0, n


def hf_generate(model, batch: list[list[int]], new_tokens: int) -> float:
    """Seconds for transformers' greedy generate of exactly ``new_tokens`` per row (left-padded batch)."""
    import torch

    width = max(map(len, batch))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    t0 = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, pad_token_id=0)  # fmt: skip
    return time.perf_counter() - t0
