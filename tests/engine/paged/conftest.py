"""Fixtures: the starter model on the paged engine, and the same weights in transformers."""

from __future__ import annotations

import pytest

from engine.backends.base import LoadOptions, ModelSpec


@pytest.fixture(scope="session")
def paged_backend(starter_path):
    """The starter model (dequantized from its GGUF) on the paged backend, on the CPU."""
    from engine.backends.paged import PagedBackend

    backend = PagedBackend()
    backend.load(
        ModelSpec(name="smollm2-135m-instruct", path=starter_path),
        # the CPU, pinned: the tests compare against float32 references, which a GPU's bfloat16 would not match
        LoadOptions(n_ctx=2048, n_seq_max=32, extra={"num_kv_blocks": 640, "max_num_batched_tokens": 512, "device": "cpu"}),
    )
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def hf_starter(starter_path):
    """transformers' model of the same GGUF (it dequantizes and un-permutes on its own)."""
    import torch

    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        starter_path.parent, gguf_file=starter_path.name, dtype=torch.float32
    )
    return model.eval()
