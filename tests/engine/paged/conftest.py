"""Fixtures: the starter model's weights in transformers (the paged backend itself is in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def hf_starter(starter_path):
    """transformers' model of the same GGUF (it dequantizes and un-permutes on its own)."""
    import torch

    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        starter_path.parent, gguf_file=starter_path.name, dtype=torch.float32
    )
    return model.eval()
