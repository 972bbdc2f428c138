"""A GGUF file as a :class:`Checkpoint`: metadata to a Hugging Face config, vocabulary to a
tokenizer, tensors dequantized to float32 with the `gguf` package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.backends.paged.loader import Checkpoint, Weights, hf_name, unpermute_qk
from engine.backends.paged.tokenizer import Tokenizer
from engine.errors import ModelLoadError

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
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises bare ValueError/IndexError/OSError on damaged files
        raise ModelLoadError(str(path), f"the GGUF file is damaged or truncated ({exc}).") from exc
    meta = reader.fields

    def get(key: str, default: Any = None) -> Any:
        return meta[key].contents() if key in meta else default

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
    if len(tokens) == 0:
        raise ModelLoadError(str(path), "the GGUF file has no tokenizer vocabulary.")
    bos = get("tokenizer.ggml.bos_token_id")
    eos = get("tokenizer.ggml.eos_token_id")
    eos_ids = [int(e) for e in (eos, get("tokenizer.ggml.eot_token_id"), get("tokenizer.ggml.eom_token_id")) if e is not None]
    try:
        tokenizer = Tokenizer.from_gguf_vocab(
            kind=get("tokenizer.ggml.model", "gpt2"),
            tokens=list(tokens),
            token_types=list(get("tokenizer.ggml.token_type", [1] * len(tokens))),
            merges=list(get("tokenizer.ggml.merges", [])),
            scores=list(get("tokenizer.ggml.scores", [0.0] * len(tokens))),
            pre=get("tokenizer.ggml.pre", "default"),
            bos_id=int(bos) if bos is not None else None,
            eos_ids=eos_ids,
            add_bos=bool(get("tokenizer.ggml.add_bos_token", arch == "llama" and get("tokenizer.ggml.model") == "llama")),
            add_space_prefix=bool(get("tokenizer.ggml.add_space_prefix", True)),
        )
    except ValueError as exc:
        raise ModelLoadError(str(path), f"its tokenizer cannot be rebuilt: {exc}.") from exc
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
        tokenizer.token_text(bos) if bos is not None else "",
        tokenizer.token_text(eos) if eos is not None else "",
    )  # fmt: skip


def _dequantize(tensor) -> np.ndarray:
    from gguf.quants import dequantize

    data = dequantize(tensor.data, tensor.tensor_type)
    data = np.ascontiguousarray(data, dtype=np.float32)
    return data if data.flags.writeable else data.copy()


__all__ = ["read_gguf", "ARCHITECTURES"]
