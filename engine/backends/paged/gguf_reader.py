"""A GGUF file as a :class:`Checkpoint`: metadata to a Hugging Face config, vocabulary to a
tokenizer, tensors dequantized to float32 with the `gguf` package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.backends.paged.loader import Checkpoint, Weights, unpermute_qk
from engine.errors import ModelLoadError
from engine.gguf import hf_name, metadata, open_gguf, vocabulary_from_gguf

# GGUF architecture -> Hugging Face model_type
ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}
# metadata key under "<arch>." -> config key
CONFIG_KEYS = {
    "block_count": "num_hidden_layers", "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size", "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps", "rope.freq_base": "rope_theta",
    "attention.key_length": "head_dim", "attention.sliding_window": "sliding_window",
}  # fmt: skip


def read_gguf(path: Path) -> Checkpoint:
    """Raises ModelLoadError when the file cannot be parsed or its architecture is not supported."""
    reader = open_gguf(path)
    meta = metadata(reader)

    def get(key: str, default: Any = None) -> Any:
        return meta.get(key, default)

    arch = get("general.architecture", "")
    if arch not in ARCHITECTURES:
        raise ModelLoadError(
            str(path), f"the paged engine cannot run GGUF architecture '{arch}' (only {', '.join(ARCHITECTURES)})."
        )
    tensors = {t.name: t for t in reader.tensors}
    config: dict[str, Any] = {"model_type": ARCHITECTURES[arch]}
    for key, name in CONFIG_KEYS.items():
        if f"{arch}.{key}" in meta:
            config[name] = get(f"{arch}.{key}")
    tokens = get("tokenizer.ggml.tokens", [])
    config["vocab_size"] = int(get(f"{arch}.vocab_size", len(tokens)))
    config["tie_word_embeddings"] = "output.weight" not in tensors
    config["attention_bias"] = False
    if arch == "qwen2" and "blk.0.attn_q.bias" not in tensors:
        config["qkv_bias"] = False
    scaling = get(f"{arch}.rope.scaling.type")
    if scaling and scaling != "none":
        config["rope_scaling"] = {
            "rope_type": scaling,
            "factor": float(get(f"{arch}.rope.scaling.factor", 1.0)),
            "original_max_position_embeddings": int(get(f"{arch}.rope.scaling.original_context_length", 0) or 0)
            or config.get("max_position_embeddings"),
        }
    if "rope_freqs.weight" in tensors:  # Llama 3.1+: llama3 scaling stored as per-frequency divisors
        factors = _dequantize(tensors["rope_freqs.weight"])
        config.setdefault("rope_scaling", {"rope_type": "default"})["freq_factors"] = factors.tolist()
    tokenizer = vocabulary_from_gguf(path, meta)
    n_heads = int(config["num_attention_heads"])
    n_kv = int(config.get("num_key_value_heads", n_heads))
    permuted = arch in ("llama", "mistral")

    def weights() -> Weights:
        for name, tensor in tensors.items():
            target = hf_name(name)
            if target is None:
                continue
            w = torch.from_numpy(_dequantize(tensor))
            if permuted and ".attn_q." in name:
                w = unpermute_qk(w, n_heads)
            elif permuted and ".attn_k." in name:
                w = unpermute_qk(w, n_kv)
            yield target, w

    return Checkpoint(
        path, config, tokenizer, get("tokenizer.chat_template"), weights,
        tokenizer.token_text(tokenizer.bos_id), tokenizer.token_text(tokenizer.eos_id),
    )  # fmt: skip


def _dequantize(tensor) -> np.ndarray:
    from gguf.quants import dequantize

    data = dequantize(tensor.data, tensor.tensor_type)
    data = np.ascontiguousarray(data, dtype=np.float32)
    return data if data.flags.writeable else data.copy()


__all__ = ["read_gguf", "ARCHITECTURES"]
