"""A GGUF file written here (tiny Llama, SentencePiece vocabulary, untied head) read by our loader and by
transformers: the same tokens and the same logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.backends.paged.loader import permute_qk, read_checkpoint
from engine.backends.paged.models import build_model

from .helpers import make_runner, paged_logits

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

PIECES = ["▁", "t", "h", "e", "a", "c", "s", "o", "n", "▁t", "he", "▁the", "▁c", "at", "▁cat", "▁a", "▁s", "at▁"]
SHAPE = dict(hidden=64, inter=96, layers=2, heads=4, kv=2)


def write_gguf(path) -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + PIECES
    types = [2, 3, 3] + [6] * 256 + [1] * len(PIECES)
    scores = [0.0] * 259 + [-float(i) for i in range(len(PIECES))]
    vocab, h, i, n_h, n_kv = len(tokens), SHAPE["hidden"], SHAPE["inter"], SHAPE["heads"], SHAPE["kv"]
    d = h // n_h
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(SHAPE["layers"])
    w.add_context_length(256)
    w.add_embedding_length(h)
    w.add_feed_forward_length(i)
    w.add_head_count(n_h)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(d)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    rng = np.random.default_rng(0)

    def t(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w.add_tensor("token_embd.weight", t(vocab, h))
    w.add_tensor("output_norm.weight", 1 + t(h, scale=0.1))
    w.add_tensor("output.weight", t(vocab, h))
    for b in range(SHAPE["layers"]):
        w.add_tensor(f"blk.{b}.attn_norm.weight", 1 + t(h, scale=0.1))
        w.add_tensor(f"blk.{b}.attn_q.weight", permute_qk(torch.from_numpy(t(n_h * d, h)), n_h).numpy())
        w.add_tensor(f"blk.{b}.attn_k.weight", permute_qk(torch.from_numpy(t(n_kv * d, h)), n_kv).numpy())
        w.add_tensor(f"blk.{b}.attn_v.weight", t(n_kv * d, h))
        w.add_tensor(f"blk.{b}.attn_output.weight", t(h, n_h * d))
        w.add_tensor(f"blk.{b}.ffn_norm.weight", 1 + t(h, scale=0.1))
        w.add_tensor(f"blk.{b}.ffn_gate.weight", t(i, h))
        w.add_tensor(f"blk.{b}.ffn_up.weight", t(i, h))
        w.add_tensor(f"blk.{b}.ffn_down.weight", t(h, i))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_gguf(path)
    return path


def test_sentencepiece_vocabulary_tokenizes_like_llama_cpp(gguf_file):
    # llama.cpp, not transformers, is the reference: they differ on leading spaces ("  the" gets
    # three "▁" from llama.cpp's always-added space prefix, two from transformers' Metaspace).
    llama_cpp = pytest.importorskip("llama_cpp")
    ours = read_checkpoint(gguf_file).tokenizer
    theirs = llama_cpp.Llama(str(gguf_file), vocab_only=True, verbose=False)
    for text in ("the cat", "a cat sat on the mat", "xyz!", "  the  cat  ", "héllo", "\n\nthe\tcat", "</s>the"):
        assert ours.encode(text) == theirs.tokenize(text.encode(), add_bos=False, special=True), text
    assert ours.encode_prompt("the cat")[0] == 1 and ours.encode_prompt("<s>the cat").count(1) == 1
    assert ours.decode(ours.encode("a cat sat")) == " a cat sat"


def test_gguf_logits_match_transformers(gguf_file):
    ckpt = read_checkpoint(gguf_file)
    assert ckpt.config["tie_word_embeddings"] is False and ckpt.chat_template.startswith("{% for m")
    model = build_model(ckpt.config, ckpt.weights(), dtype=torch.float32, device=torch.device("cpu"), path="tiny")
    ref = transformers.AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    tokens = torch.randint(0, ckpt.config["vocab_size"], (40,), generator=torch.Generator().manual_seed(0)).tolist()
    got = paged_logits(make_runner(model), tokens, [25, 13, 1, 1])
    with torch.no_grad():
        want = ref(torch.tensor([tokens])).logits[0]
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)
