"""What only the llama.cpp backend does (grammar-constrained output, its load errors), with the real
starter model. Behaviour every backend shares is in test_conformance.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.backends.base import ModelSpec
from engine.backends.llamacpp import LlamaCppBackend
from engine.errors import ModelLoadError
from engine.types import ChatMessage, GenerationRequest, SamplingParams


def test_json_schema_output_parses_and_validates(llama_backend):
    import json

    import jsonschema

    from engine.types import ResponseFormat

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    req = GenerationRequest(
        model="s",
        messages=(ChatMessage("user", "Give a person as JSON."),),
        params=SamplingParams(temperature=0, max_tokens=80),
        response_format=ResponseFormat(type="json_schema", schema=schema),
    )
    text = "".join(c.text for c in llama_backend.stream(req))
    jsonschema.validate(json.loads(text), schema)


def test_a_refused_greedy_draw_looks_among_the_best_candidates_first_and_draws_the_same(llama_backend, monkeypatch):
    # A forced tool call refuses many drawn tokens; offering the grammar the highest-logit candidates first
    # must choose exactly what masking the whole vocabulary chooses (which it does when given too few).
    from engine.backends.llamacpp import sampler
    from engine.tools.spec import parse_tool_choice, parse_tools

    tools = parse_tools([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}}])  # fmt: skip
    req = dict(model="s", messages=(ChatMessage("user", "Weather in Lisbon for 3 days?"),), tools=tools,
               tool_choice=parse_tool_choice("required", tools))  # fmt: skip
    refused = []
    full = sampler.SequenceSampler._draw
    monkeypatch.setattr(sampler.SequenceSampler, "_draw", lambda self, logits, mask: refused.append(mask) or full(self, logits, mask=mask))

    def call() -> tuple:
        chunks = list(llama_backend.stream(GenerationRequest(**req, params=SamplingParams(max_tokens=60, temperature=0))))
        return tuple(t for c in chunks for t in c.token_ids), [(t.name, t.arguments) for t in chunks[-1].tool_calls]

    # Both compared calls find the prompt cached: a cold prompt's last token is computed in a longer block, whose
    # sums can differ in the last bits on some CPUs (AVX2 here), enough to flip a near-tie.
    call()
    refused.clear()
    fast = call()
    masked_fast = sum(m is not None for m in refused)
    refused.clear()
    monkeypatch.setattr(sampler, "REFUSED_CANDIDATES", 1 << 20)  # more than the vocabulary: always mask it all
    assert call() == fast and fast[1]
    assert sum(m is not None for m in refused) > masked_fast


@pytest.mark.parametrize("candidates", [256, 8, 4])
def test_a_refused_greedy_draw_breaks_a_tie_as_the_greedy_chain_does(starter_path: Path, monkeypatch, candidates):
    # Allowed tokens with the same logit: the whole masked vocabulary's greedy draw takes the lowest id, so the
    # candidates offered first must too, also when the tie reaches past the last candidate (4: some of the tied
    # tokens are left out of the candidates, the lowest id perhaps among them).
    import numpy as np

    from engine.backends.llamacpp import sampler
    from engine.backends.llamacpp.model import GGUFModel

    monkeypatch.setattr(sampler, "REFUSED_CANDIDATES", candidates)
    model = GGUFModel(starter_path)
    draw = sampler.SequenceSampler(model, SamplingParams(temperature=0), "root ::= [a-z]")
    try:
        letters = [t for c in "abcdefghijklmnopqrstuvwxyz" for t in model.tokenize(c)]
        refused = model.tokenize(" the")
        assert len(letters) == 26 and len(refused) == 1
        rng = np.random.default_rng(0)
        for _ in range(20):
            logits = rng.normal(-10.0, 1.0, model.n_vocab).astype(np.float32)
            logits[refused[0]] = 5.0
            tied = rng.choice(letters, 6, replace=False)
            logits[tied] = 3.0
            assert draw._draw_allowed(logits, draw.grammar) == min(tied)
    finally:
        draw.close()
        model.close()


def test_a_greedy_draw_is_what_llama_cpps_own_chain_draws_biases_included(llama_backend, monkeypatch):
    # Greedy sampling without penalties takes the argmax of the biased logits itself; llama.cpp's chain
    # (logit bias, then greedy) must draw the same token at every step, with and without biases.
    import llama_cpp

    from engine.backends.llamacpp import sampler

    drawn: list[tuple[int, int]] = []
    fast = sampler.SequenceSampler.sample

    def both(self, ctx, index, **kwargs):
        token = fast(self, ctx, index, **kwargs)
        if self.params is mine[0]:  # this test's request only (the backend is shared)
            drawn.append((token, int(llama_cpp.llama_sampler_sample(self.chain, ctx, index))))
        return token

    monkeypatch.setattr(sampler.SequenceSampler, "sample", both)
    argmax = sampler.SequenceSampler._greedy
    taken: list[int] = []
    monkeypatch.setattr(
        sampler.SequenceSampler, "_greedy", lambda self, logits: (self.params is mine[0] and taken.append(1)) or argmax(self, logits)
    )
    mine: list = [None]
    top = llama_backend.tokenize(" the")[0]
    for bias in ({}, {top: 5.0, 0: -100.0}, {top: -100.0}):
        req = GenerationRequest(
            model="s", messages=(ChatMessage("user", "Write one sentence about the sea."),),
            params=SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logit_bias=bias),
        )  # fmt: skip
        drawn.clear()
        taken.clear()
        mine[0] = req.params
        list(llama_backend.stream(req))
        assert len(drawn) == 24 and all(a == b for a, b in drawn), (bias, drawn)
        assert len(taken) == 24  # drawn by the argmax, not by the chain
        if bias.get(top) == -100.0:
            assert top not in {a for a, _ in drawn}


def test_a_schema_with_keywords_json_schema_does_not_define_is_enforced_without_them(llama_backend):
    import json

    from engine.types import ResponseFormat

    schema = {"type": "object", "properties": {"city": {"type": "string", "x-ui": "map"}, "extra": {"": {}}},
              "required": ["city"], "additionalProperties": False, "x-vendor": [1]}  # fmt: skip
    req = GenerationRequest(
        model="s",
        messages=(ChatMessage("user", "Name a city as JSON."),),
        params=SamplingParams(temperature=0, max_tokens=40),
        response_format=ResponseFormat(type="json_schema", schema=schema),
    )
    chunks = list(llama_backend.stream(req))
    if chunks[-1].finish_reason == "stop":
        answer = json.loads("".join(c.text for c in chunks))
        assert isinstance(answer["city"], str) and set(answer) <= {"city", "extra"}


def test_truncated_gguf_is_a_load_error_naming_the_path(tmp_path: Path, starter_path: Path):
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(starter_path.read_bytes()[: 5_000_000])
    backend = LlamaCppBackend()
    with pytest.raises(ModelLoadError) as info:
        backend.load(ModelSpec(name="bad", path=bad))
    assert str(bad) in str(info.value)
    backend.close()


def test_non_gguf_file_is_a_load_error_naming_the_path(tmp_path: Path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("this is not a model")
    backend = LlamaCppBackend()
    with pytest.raises(ModelLoadError) as info:
        backend.load(ModelSpec(name="bad", path=bad))
    assert str(bad) in str(info.value)
    backend.close()


def test_threads_tokenizing_at_once_each_get_their_own_tokens(llama_backend):
    model = llama_backend.model
    texts = [f"Request {i}: " + " ".join(f"word{i}x{j}" for j in range(200)) for i in range(8)]
    expected = [model.tokenize(t) for t in texts]
    got: dict[int, list[bool]] = {i: [] for i in range(len(texts))}

    def work(i: int) -> None:
        for _ in range(50):
            got[i].append(model.tokenize(texts[i]) == expected[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(all(v) and len(v) == 50 for v in got.values())


def test_embeddings_compute_on_the_decode_thread(llama_backend, monkeypatch):
    """llama.cpp computes on an OpenMP team per calling thread; a second team (an embedding request's
    thread) would slow every later decode step, so embeddings run on the thread that decodes."""
    import llama_cpp

    seen: list[str] = []
    real = llama_cpp.llama_decode

    def recording(ctx, batch):
        seen.append(threading.current_thread().name)
        return real(ctx, batch)

    monkeypatch.setattr(llama_cpp, "llama_decode", recording)
    box: list = []
    caller = threading.Thread(target=lambda: box.append(llama_backend.embed(["a river", "a mountain"])), name="caller")
    caller.start()
    caller.join(timeout=60)
    vectors, n_tokens = box[0]
    assert len(vectors) == 2 and n_tokens > 0
    assert seen and set(seen) == {llama_backend.loop._thread.name}
    # a chat still streams afterwards
    req = GenerationRequest(model="s", prompt="Hello", params=SamplingParams(temperature=0, max_tokens=4))
    assert any(c.token_ids for c in llama_backend.stream(req))


def test_a_build_with_amx_kernels_loads_weights_unpacked_and_others_repack(starter_path: Path, monkeypatch, caplog):
    """llama.cpp's AMX kernels crash on some CPUs that have AMX; where a build has them, weights stay unpacked."""
    import llama_cpp

    from engine.backends.llamacpp import model as model_module

    seen: list[bool] = []
    load = llama_cpp.llama_model_load_from_file

    def spy(path, params):
        seen.append(bool(params.use_extra_bufts))
        return load(path, params)

    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", spy)
    info = llama_cpp.llama_print_system_info().decode()
    for reported, repacked in ((info.replace("AMX_INT8 = 1", ""), True), ("CPU : AVX2 = 1 | AMX_INT8 = 1 |", False)):
        model_module._extra_buffers_allowed.cache_clear()
        monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda r=reported: r.encode())
        model = model_module.GGUFModel(starter_path)
        assert model.n_vocab > 0
        model.close()
        assert seen[-1] is repacked
    assert "AMX kernels" in caplog.text
    model_module._extra_buffers_allowed.cache_clear()


def test_special_tokens_are_parsed_in_bounded_pieces_with_the_ids_of_one_call(llama_backend, monkeypatch):
    """llama.cpp's pass over special tokens is quadratic in their number (a chat of 33,000 short messages held a
    thread for half a minute); the model tokenizes in pieces of a few, cut where the ids cannot change."""
    import random

    import engine.literal_text as literal_text

    model = llama_backend.model
    words = ["hi", " there", "\n", "  ", "a", "é", "\n\n", " ", "x<", "|", "\t", "<|im_start|>", "<|im_end|>",
             "<|endoftext|>", "user"]  # fmt: skip
    rng = random.Random(7)
    texts = ["", "<|im_start|>", " <|im_end|> ", "<|im_start|><|im_end|>\n\n<|endoftext|>x"]
    texts += ["".join(rng.choice(words) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    for per in (1, 2):
        monkeypatch.setattr(literal_text, "SPECIALS_PER_CALL", per)
        for text in texts:
            for add_special in (False, True):
                assert model.tokenize(text, add_special=add_special) == model._tokenize(text, add_special, True), text
    monkeypatch.setattr(literal_text, "SPECIALS_PER_CALL", 64)
    calls = []
    one_call = model._tokenize
    monkeypatch.setattr(model, "_tokenize", lambda text, *a: calls.append(text) or one_call(text, *a))
    chat = "<|im_start|>user\na<|im_end|>\n" * 2000
    assert len(model.tokenize(chat)) == 6 * 2000
    assert max(len(model.special_texts.pattern.findall(c)) for c in calls) == 64 and "".join(calls) == chat
    assert model.tokenize(chat, parse_special=False) == model._tokenize(chat, False, False)


@pytest.mark.parametrize("add_bos", [None, True, False])
def test_pieces_keep_what_add_special_puts_around_a_text_for_a_bert_vocabulary(tmp_path, monkeypatch, add_bos):
    """A WordPiece (BERT) vocabulary gets CLS before a text and SEP after it whatever its add_bos key says."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    import engine.literal_text as literal_text
    from engine.backends.llamacpp.model import GGUFModel

    path = tmp_path / "bert-vocab.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("t")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_feed_forward_length(64)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("bert")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<u>", "hello", "world", "##lo", "he"]
    words += [chr(c) for c in range(33, 127)]
    w.add_token_list([t.encode() for t in words])
    w.add_token_scores([0.0] * len(words))
    w.add_token_types([3, 2, 3, 3, 3, 4] + [1] * (len(words) - 6))  # control, unknown, user-defined, normal
    w.add_bos_token_id(2)
    w.add_eos_token_id(3)
    w.add_sep_token_id(3)
    w.add_unk_token_id(1)
    w.add_pad_token_id(0)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((len(words), 64), dtype=np.float32))
    for name in ("attn_norm", "ffn_norm"):
        w.add_tensor(f"blk.0.{name}.weight", np.ones(64, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        w.add_tensor(f"blk.0.{name}.weight", rng.standard_normal((64, 64), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    monkeypatch.setattr(literal_text, "SPECIALS_PER_CALL", 4)
    model = GGUFModel(path)
    try:
        text = "hello <u> world [MASK] " * 12
        for parse_special in (False, True):
            assert model.tokenize(text, add_special=True, parse_special=parse_special) == model._tokenize(text, True, parse_special)
    finally:
        model.close()
