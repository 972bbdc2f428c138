"""The one GGUF vocabulary (engine.gguf) tokenizes as llama.cpp does: the starter model's byte-level BPE
vocabulary, and a starcoder-style one written here; and every backend that tokenizes on its own gets it."""

from __future__ import annotations

import numpy as np
import pytest

from engine.gguf import hf_name, read_metadata, vocabulary_from_gguf
from engine.gguf.vocab import byte_alphabet

gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

TEXTS = (
    "Hello, world!",
    "The year 2024 had 366 days; 1234567 is a number.",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew\n\nlines\r\n",
    "héllo wörld, naïve café — “quotes” 😀🎉",
    "def add(a, b):\n    return a + b  # 42\n",
    "<|im_start|>user\nHi<|im_end|>",
    "don't won't I'll we've they're",
)
SPECIALS = ["<|endoftext|>", "<fim_prefix>", "<fim_middle>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2", "12 3"]


def llama_cpp_tokens(path, text: str) -> list[int]:
    model = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    return model.tokenize(text.encode(), add_bos=False, special=True)


@pytest.fixture(scope="module")
def starter_reference(starter_path):
    model = llama_cpp.Llama(str(starter_path), vocab_only=True, verbose=False)
    return {t: model.tokenize(t.encode(), add_bos=False, special=True) for t in TEXTS}


def test_starter_vocabulary_tokenizes_as_llama_cpp(starter_path, starter_reference):
    vocab = vocabulary_from_gguf(starter_path, read_metadata(starter_path))
    for text, want in starter_reference.items():
        assert vocab.encode(text) == want, text
        assert vocab.decode(want) == text.replace("<|im_start|>", "").replace("<|im_end|>", ""), text
    assert vocab.token_text(vocab.eos_id) == "<|im_end|>" and vocab.eos_id in vocab.eog_ids


def write_starcoder_gguf(
    path, specials: list[str] = SPECIALS, *, eos: int = 0, template: str | None = None, context: int = 128
) -> list[str]:
    """A tiny Llama-shaped model whose vocabulary is byte-level BPE with starcoder's pre-tokenizer: ``specials``
    (control tokens) first, the first of them BOS, ``eos`` the id of EOS; ``template`` its chat template."""
    alphabet = sorted(byte_alphabet(), key=lambda c: byte_alphabet()[c])
    tokens = [*specials, *alphabet, *(m.replace(" ", "") for m in MERGES)]
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    hidden, heads, layers = 32, 4, 1
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(context)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(64)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // heads)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("starcoder")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(0)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)
    if template is not None:
        w.add_chat_template(template)
    rng = np.random.default_rng(0)

    def t(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    w.add_tensor("token_embd.weight", t(len(tokens), hidden))
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    for b in range(layers):
        w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{b}.{name}.weight", t(hidden, hidden))
        w.add_tensor(f"blk.{b}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(f"blk.{b}.ffn_gate.weight", t(64, hidden))
        w.add_tensor(f"blk.{b}.ffn_up.weight", t(64, hidden))
        w.add_tensor(f"blk.{b}.ffn_down.weight", t(hidden, 64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tokens


@pytest.fixture(scope="module")
def starcoder_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-starcoder-vocab.gguf"
    write_starcoder_gguf(path)
    return path


def test_starcoder_style_vocabulary_tokenizes_as_llama_cpp(starcoder_gguf):
    vocab = vocabulary_from_gguf(starcoder_gguf, read_metadata(starcoder_gguf))
    reference = llama_cpp.Llama(str(starcoder_gguf), vocab_only=True, verbose=False)
    texts = (*TEXTS, "the world 12345 in 2024", "<fim_prefix>def f():<fim_middle>", "the<|endoftext|>world")
    for text in texts:
        assert vocab.encode(text) == reference.tokenize(text.encode(), add_bos=False, special=True), text
    # starcoder splits digits one by one, so the "1 2" merge never applies
    assert vocab.encode("123") == [vocab.tokenizer.token_to_id(d) for d in "123"]
    assert vocab.piece(vocab.tokenizer.token_to_id("<fim_prefix>")) == b""


def test_paged_engine_reads_the_same_vocabulary(starcoder_gguf, starter_path, starter_reference):
    pytest.importorskip("torch")
    from engine.backends.paged.loader import read_checkpoint

    ours = {path: read_checkpoint(path).tokenizer for path in (starcoder_gguf, starter_path)}
    for path, tokenizer in ours.items():
        shared = vocabulary_from_gguf(path, read_metadata(path))
        for text in TEXTS:
            assert tokenizer.encode(text) == shared.encode(text), (path.name, text)
    starter = ours[starter_path]
    assert {t: starter.encode(t) for t in TEXTS} == starter_reference


def test_one_tensor_name_map_serves_torch_and_mlx_names():
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("blk.3.attn_q.scales") == "model.layers.3.self_attn.q_proj.scales"  # MLX's quantized parts
    assert hf_name("blk.3.attn_q.biases") == "model.layers.3.self_attn.q_proj.biases"
    assert hf_name("blk.1.unknown.weight") is None


def test_tokenizing_a_long_prompt_lets_the_other_threads_run(starter_path):
    """A long prompt is tokenized without the GIL: the worker's event loop and its other requests go on meanwhile.

    With a switch interval longer than the test, a thread gives the GIL up only where it lets go of it itself: the
    main thread can see the tokenizing thread inside its call only if the call let go."""
    import sys
    import threading
    import time

    vocab = vocabulary_from_gguf(starter_path, read_metadata(starter_path))
    text = " ".join(TEXTS) * 2_000  # ~100,000 tokens
    state = {"inside": False, "tokens": None}

    def tokenize() -> None:
        state["inside"] = True
        state["tokens"] = vocab.encode(text)
        state["inside"] = False

    seen_inside = 0
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        worker = threading.Thread(target=tokenize)
        worker.start()
        while worker.is_alive():
            seen_inside += state["inside"]
            time.sleep(0)  # lets go of the GIL, so the thread can start and, once out of its call, finish
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert state["tokens"] is not None and len(state["tokens"]) > 50_000
    assert seen_inside > 0


def test_content_and_control_texts_tokenize_at_once_from_many_threads_as_llama_cpp(starter_path):
    """A message's content keeps control-token texts as text (llama.cpp's special=False) while the template around
    it turns them into control tokens, from many threads at once, as a busy worker tokenizes."""
    from concurrent.futures import ThreadPoolExecutor

    vocab = vocabulary_from_gguf(starter_path, read_metadata(starter_path))
    model = llama_cpp.Llama(str(starter_path), vocab_only=True, verbose=False)
    text = "<|im_start|>user\nHi<|im_end|> and <|endoftext|> " * 50
    want = {special: model.tokenize(text.encode(), add_bos=False, special=special) for special in (True, False)}
    assert want[True] != want[False]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: (i % 2 == 0, vocab.encode(text, parse_special=i % 2 == 0)), range(400)))
    assert all(tokens == want[special] for special, tokens in got)
