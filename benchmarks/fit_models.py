"""GGUF files of real shapes with random weights, written with the `gguf` library for memory checks.

Only memory matters here, so the weights are random Q8_0 blocks (a small scale and random int8s,
written raw, no float tensors in between) and the vocabulary is made-up pieces plus byte tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Shape:
    name: str
    arch: str
    layers: int
    embd: int
    heads: int
    kv_heads: int
    ff: int
    vocab: int
    ctx: int
    qkv_bias: bool = False
    rope_theta: float = 10000.0
    experts: int = 0  # an MoE (Mixtral-style, llama architecture): experts per layer, each of ``ff``
    experts_used: int = 0


# Llama-3.2-1B and Qwen2.5-0.5B as their configs give them (embeddings tied to the output head).
LLAMA_1B = Shape("llama-1b", "llama", 16, 2048, 32, 8, 8192, 128_256, 131_072, rope_theta=500_000.0)
QWEN_05B = Shape("qwen-0.5b", "qwen2", 24, 896, 14, 2, 4864, 151_936, 32_768, qkv_bias=True, rope_theta=1_000_000.0)
# Qwen2.5-1.5B's shape, and a small MoE (16 layers, 8 experts of 1,024, 2 per token; about 0.9 B weights in all)
QWEN_15B = Shape("qwen-1.5b", "qwen2", 28, 1536, 12, 2, 8960, 151_936, 32_768, qkv_bias=True, rope_theta=1_000_000.0)
# Qwen3-1.7B's shape (as qwen2, without its q/k norms: a few thousand weights), the recommended list's first chat
# suggestion on a 2-core machine
QWEN3_17B = Shape("qwen3-1.7b", "qwen2", 28, 2048, 16, 8, 6144, 151_936, 40_960, rope_theta=1_000_000.0)
SMALL_MOE = Shape("moe-8x", "llama", 16, 1024, 16, 4, 1024, 32_000, 32_768, experts=8, experts_used=2)


def _q8_0(rng: np.random.Generator, rows: int, cols: int, spread: float = 0.0):
    """Raw Q8_0 blocks for a [rows, cols] weight: an f16 scale then 32 int8s per block. The scales are all 0.002, or
    log-normal around it with ``spread`` in the logarithm as a real model's are (0.35: the starter's); llama.cpp on
    x86 runs one repeated scale faster than a real model's many (docs/fit.md)."""
    import gguf

    blocks = rows * cols // 32
    data = np.empty((blocks, 34), dtype=np.uint8)
    scales = 0.002 * np.exp(rng.normal(0.0, spread, blocks)) if spread else np.full(blocks, 0.002)
    data[:, :2] = scales.astype(np.float16).view(np.uint8).reshape(blocks, 2)
    data[:, 2:] = rng.integers(0, 256, size=(blocks, 32), dtype=np.uint8)
    return data.reshape(rows, cols // 32 * 34), gguf.GGMLQuantizationType.Q8_0


def write_random_gguf(path: Path, shape: Shape, *, seed: int = 0, scale_spread: float = 0.0) -> Path:
    """Write a loadable GGUF model of ``shape`` with random Q8_0 weights to ``path`` (``scale_spread``: see
    :func:`_q8_0`)."""
    import gguf

    rng = np.random.default_rng(seed)
    head_dim = shape.embd // shape.heads
    w = gguf.GGUFWriter(str(path), shape.arch)
    w.add_name(shape.name)
    w.add_block_count(shape.layers)
    w.add_context_length(shape.ctx)
    w.add_embedding_length(shape.embd)
    w.add_feed_forward_length(shape.ff)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if shape.experts:
        w.add_expert_count(shape.experts)
        w.add_expert_used_count(shape.experts_used)
    w.add_tokenizer_model("llama")
    specials = [b"<unk>", b"<s>", b"</s>"]
    byte_tokens = [f"<0x{i:02X}>".encode() for i in range(256)]
    words = [f"\u2581w{i}".encode() for i in range(shape.vocab - len(specials) - len(byte_tokens))]
    w.add_token_list(specials + byte_tokens + words)
    w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(len(words))])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(words))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def norm(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    def linear(name: str, rows: int, cols: int) -> None:
        data, kind = _q8_0(rng, rows, cols, scale_spread)
        w.add_tensor(name, data, raw_dtype=kind)  # the byte shape gives [rows, cols]

    linear("token_embd.weight", shape.vocab, shape.embd)
    kv_dim = shape.kv_heads * head_dim
    for i in range(shape.layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", shape.embd)
        linear(p + "attn_q.weight", shape.embd, shape.embd)
        linear(p + "attn_k.weight", kv_dim, shape.embd)
        linear(p + "attn_v.weight", kv_dim, shape.embd)
        if shape.qkv_bias:
            w.add_tensor(p + "attn_q.bias", np.zeros(shape.embd, dtype=np.float32))
            w.add_tensor(p + "attn_k.bias", np.zeros(kv_dim, dtype=np.float32))
            w.add_tensor(p + "attn_v.bias", np.zeros(kv_dim, dtype=np.float32))
        linear(p + "attn_output.weight", shape.embd, shape.embd)
        norm(p + "ffn_norm.weight", shape.embd)
        if shape.experts:
            w.add_tensor(p + "ffn_gate_inp.weight", rng.standard_normal((shape.experts, shape.embd), dtype=np.float32))
            for name, rows, cols in (("gate", shape.ff, shape.embd), ("up", shape.ff, shape.embd), ("down", shape.embd, shape.ff)):
                data, kind = _q8_0(rng, shape.experts * rows, cols, scale_spread)
                w.add_tensor(f"{p}ffn_{name}_exps.weight", data.reshape(shape.experts, rows, -1), raw_dtype=kind)
            continue
        linear(p + "ffn_gate.weight", shape.ff, shape.embd)
        linear(p + "ffn_up.weight", shape.ff, shape.embd)
        linear(p + "ffn_down.weight", shape.embd, shape.ff)
    norm("output_norm.weight", shape.embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def requantize(src: Path, dst: Path, ftype: str) -> Path:
    """``src`` re-quantized to ``ftype`` (``Q4_K_M``, ``IQ4_NL``...) with llama.cpp's own quantizer."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src} to {ftype}")
    return dst


__all__ = ["Shape", "LLAMA_1B", "QWEN_05B", "QWEN_15B", "SMALL_MOE", "write_random_gguf", "requantize"]
