"""Shared by the paged-engine benchmarks: the starter model on the paged engine and in transformers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_paged(*, n_ctx: int = 2048, max_num_seqs: int = 32, blocks: int = 2048, budget: int = 512, **paged):
    """The starter model on Hearth's paged engine (CPU; float32 unless ``paged`` options say otherwise)."""
    from engine.backends.base import LoadOptions, ModelSpec, PagedOptions
    from engine.backends.paged import PagedBackend
    from engine.starter import starter_model_path

    backend = PagedBackend()
    options = LoadOptions(n_ctx=n_ctx, n_seq_max=max_num_seqs, n_batch=budget, paged=PagedOptions(num_kv_blocks=blocks, **paged))
    backend.load(ModelSpec("starter", starter_model_path()), options)
    return backend


def load_transformers(dtype: str = "float32"):
    """The same GGUF in transformers (dequantized to ``dtype``), the reference side."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.starter import starter_model_path

    path = starter_model_path()
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=getattr(torch, dtype)).eval()


class TransformersSide:
    """transformers' ``generate`` on the starter model in ``dtype``."""

    def __init__(self, dtype: str = "float32", threads: int | None = None) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.model = load_transformers(dtype)

    def generate(self, batch: list[list[int]], new_tokens: int) -> float:
        return hf_generate(self.model, batch, new_tokens)

    def decode_speed(self, prompt: list[int], new_tokens: int) -> tuple[float, list[int]]:
        """(decode tokens/s excluding the first token, the greedy tokens) for one prompt."""
        import torch

        one = hf_generate(self.model, [prompt], 1)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                      max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)  # fmt: skip
        full = time.perf_counter() - t0
        return (new_tokens - 1) / (full - one), out[0, len(prompt) :].tolist()


class PagedSide:
    """The starter model on the paged engine, with the paged options ``paged``."""

    def __init__(self, threads: int | None = None, **paged) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.backend = load_paged(**paged)

    def decode_speed(self, prompt: str, new_tokens: int) -> tuple[float, list[int]]:
        """(decode tokens/s excluding the first token, the greedy tokens) for one prompt."""
        from engine.types import GenerationRequest, SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
        request = GenerationRequest(model="s", prompt=prompt, params=params)
        first = last = None
        ids: list[int] = []
        for chunk in self.backend.stream(request):
            if chunk.token_ids:
                last = time.perf_counter()
                first = first or last
                ids.extend(chunk.token_ids)
        return (len(ids) - 1) / (last - first), ids

    def tokenize(self, text: str) -> list[int]:
        return self.backend.tokenize(text)

    def close(self) -> None:
        self.backend.close()


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
