"""Shared by the paged-engine benchmarks: the starter model on the paged engine and in transformers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_paged(*, n_ctx: int = 2048, max_num_seqs: int = 32, blocks: int = 2048, budget: int = 512, **extra):
    """The starter model on Hearth's paged engine (CPU; float32 unless ``extra`` says otherwise)."""
    from engine.backends.base import LoadOptions, ModelSpec
    from engine.backends.paged import PagedBackend
    from engine.starter import starter_model_path

    backend = PagedBackend()
    extra = {"num_kv_blocks": blocks, "max_num_batched_tokens": budget, **extra}
    backend.load(ModelSpec("starter", starter_model_path()), LoadOptions(n_ctx=n_ctx, n_seq_max=max_num_seqs, extra=extra))
    return backend


def load_transformers(dtype: str = "float32"):
    """The same GGUF in transformers (dequantized to ``dtype``), the reference side."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.starter import starter_model_path

    path = starter_model_path()
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=getattr(torch, dtype)).eval()


class Child:
    """A benchmark side in a process of its own: ``Child("TransformersSide", dtype="float32").generate(...)``
    builds that class of this module in the child and calls its methods there.

    torch runs CPU ops on an OpenMP team per calling thread; two teams in one process (say the paged
    engine's thread and transformers' caller) oversubscribe the cores and slow whichever runs. Apart,
    each side has the machine to itself while it runs, as it would in its own program.
    """

    def __init__(self, side: str, **kwargs) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(child, side, kwargs), daemon=True)
        self._proc.start()
        child.close()
        self._answer()  # built

    def _answer(self):
        kind, value = self._conn.recv()
        if kind == "error":
            raise RuntimeError(f"benchmark side failed: {value}")
        return value

    def __getattr__(self, method: str):
        def call(*args):
            self._conn.send((method, args))
            return self._answer()

        return call

    def close(self) -> None:
        self._conn.send(None)
        self._proc.join(timeout=60)


def _child_main(conn, side: str, kwargs: dict) -> None:
    try:
        obj = globals()[side](**kwargs)
        conn.send(("ok", None))
        while (job := conn.recv()) is not None:
            method, args = job
            conn.send(("ok", getattr(obj, method)(*args)))
        getattr(obj, "close", lambda: None)()
    except Exception as exc:  # reported to the parent, which raises it
        conn.send(("error", repr(exc)))


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
    """The starter model on the paged engine, with engine options ``extra``."""

    def __init__(self, threads: int | None = None, **extra) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.backend = load_paged(**extra)

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
