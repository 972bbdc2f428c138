"""GGUF reading: tensor names, llama.cpp's Q/K permutation, config from metadata."""

from __future__ import annotations

import numpy as np
import torch

from engine.backends.paged.loader import permute_qk, read_checkpoint, unpermute_qk
from engine.gguf import hf_name


def test_unpermute_undoes_llama_cpp_permutation_like_transformers_does():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    w = torch.randn(3 * 64, 40)
    permuted = permute_qk(w, 3)
    assert not torch.equal(permuted, w)
    assert torch.equal(unpermute_qk(permuted, 3), w)
    theirs = LlamaTensorProcessor()._reverse_permute_weights(permuted.numpy(), 3)
    assert np.array_equal(theirs, w.numpy())


def test_gguf_tensor_names_map_to_hugging_face_names():
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.7.attn_q.weight") == "model.layers.7.self_attn.q_proj.weight"
    assert hf_name("blk.0.attn_k_norm.weight") == "model.layers.0.self_attn.k_norm.weight"
    assert hf_name("blk.3.ffn_gate.weight") == "model.layers.3.mlp.gate_proj.weight"
    assert hf_name("blk.3.attn_q.bias") == "model.layers.3.self_attn.q_proj.bias"
    assert hf_name("rope_freqs.weight") is None


def test_starter_gguf_config_tokenizer_and_template(starter_path):
    ckpt = read_checkpoint(starter_path)
    cfg = ckpt.config
    assert cfg["model_type"] == "llama" and cfg["num_hidden_layers"] == 30 and cfg["num_key_value_heads"] == 3
    assert cfg["tie_word_embeddings"] is True and cfg["rope_theta"] == 100000.0
    assert "<|im_start|>" in ckpt.chat_template
    tok = ckpt.tokenizer
    assert tok.eos_id == 2 and 2 in tok.eog_ids and not tok.add_bos
    text = "Hello, wörld! 12345 😀"
    assert tok.decode(tok.encode(text)) == text
    assert tok.piece(tok.eos_id) == b""  # control tokens add no text
