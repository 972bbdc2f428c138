"""Fill in the middle (engine.infill): the prompt's layout and cuts, the markers found as llama.cpp finds them,
and the same prompt through OpenAI's ``suffix``, Ollama's ``suffix`` and llama-server's ``/infill`` on the
llama.cpp and paged backends (the tiny code model of tests/engine/server/tiny_coder.py)."""

from __future__ import annotations

import httpx
import pytest

from engine.errors import InvalidRequest
from engine.infill import FimTokens, Infill, infill_tokens
from engine.types import GenerationRequest
from tests.engine.server.conftest import Server

CODER = "tiny-coder"
FIM = FimTokens(pre=-1, suf=-2, mid=-3, pad=-4, rep=-5, sep=-6)
PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"


def chars(text: str) -> list[int]:
    """A vocabulary of one token per character (its code point)."""
    return [ord(c) for c in text]


def test_the_prompt_is_prefix_suffix_middle_with_the_typed_text_after_the_prefix():
    ids = infill_tokens(Infill("ab", "cd"), "x", fim=FIM, encode=chars, bos=None, n_ctx=100)
    assert ids == [FIM.pre, *chars("abx"), FIM.suf, *chars("cd"), FIM.mid]
    with_bos = infill_tokens(Infill("ab", ""), "", fim=FIM, encode=chars, bos=7, n_ctx=100)
    assert with_bos == [7, FIM.pre, *chars("ab"), FIM.suf, FIM.mid]


def test_other_files_come_first_in_the_repository_frame_and_without_a_separator_as_snippets():
    files = (("util.py", "X"), ("tmp", "Y"))
    ids = infill_tokens(Infill("a", "b", files), "", fim=FIM, encode=chars, bos=None, n_ctx=4096)
    frame = [FIM.rep, *chars("myproject\n"), FIM.sep, *chars("util.py\nX"), FIM.sep, *chars("tmp\nY"),
             FIM.sep, *chars("filename\n")]  # fmt: skip
    assert ids == [*frame, FIM.pre, *chars("a"), FIM.suf, *chars("b"), FIM.mid]
    # llama-server's /infill opens with the frame even without other files
    assert infill_tokens(Infill("a", "b", project=True), "", fim=FIM, encode=chars, bos=None, n_ctx=4096)[:11] == [
        FIM.rep, *chars("myproject\n")]  # fmt: skip
    plain = FimTokens(pre=-1, suf=-2, mid=-3)
    ids = infill_tokens(Infill("a", "b", (("f", "Z"),)), "", fim=plain, encode=chars, bos=None, n_ctx=4096)
    assert ids == [*chars("\n\n--- snippet ---\n\nZ"), plain.pre, *chars("a"), plain.suf, *chars("b"), plain.mid]


def test_long_texts_are_cut_as_llama_server_cuts_them_the_gap_kept():
    prefix, suffix = "p" * 5000 + "P", "S" + "s" * 5000
    ids = infill_tokens(Infill(prefix, suffix), "", fim=FIM, encode=chars, bos=None, n_ctx=32768)
    pre, suf = ids.index(FIM.pre), ids.index(FIM.suf)
    assert ids[suf - 1] == ord("P") and suf - pre - 1 == 1536  # the prefix's end, three quarters of 2,048
    assert ids[suf + 1] == ord("S") and len(ids) - suf - 2 == 510  # the suffix's start, a quarter less 2
    typed = infill_tokens(Infill(prefix, suffix), "xy", fim=FIM, encode=chars, bos=None, n_ctx=32768)
    assert len(typed) - typed.index(FIM.suf) - 2 == 508  # the typed text comes out of the suffix's share
    # a small context: a quarter is left to the answer, the rest shared the same way; no room for other files
    ids = infill_tokens(Infill(prefix, suffix, (("f", "E" * 900),)), "", fim=FIM, encode=chars, bos=None, n_ctx=512)
    assert len(ids) <= 384 and ids[0] == FIM.pre and ids[-1] == FIM.mid
    assert ids[ids.index(FIM.suf) - 1] == ord("P") and ids[ids.index(FIM.suf) + 1] == ord("S")
    # the other files fill the rest of a larger one, the nearest to the gap kept, whatever the prefix's length:
    # the prompt's start stays the same from one keystroke to the next (the prefix cache reads it)
    files = (("f", "E" * 2000),)
    short = infill_tokens(Infill("a", "b", files), "", fim=FIM, encode=chars, bos=None, n_ctx=4096)
    pre = short.index(FIM.pre)
    assert pre == 4096 - 1024 - 3 - 2048 and short[0] == ord("E") and short[pre - 10 : pre] == [FIM.sep, *chars("filename\n")]
    longer = infill_tokens(Infill("a" * 700, "b", files), "x", fim=FIM, encode=chars, bos=None, n_ctx=4096)
    assert longer[:pre] == short[:pre] and len(longer) < 4096 - 1024


def test_markers_are_found_by_declared_id_then_by_text_as_llama_cpp_finds_them():
    texts = {"<|fim_prefix|>": 10, "<|fim_suffix|>": 11, "<|fim_middle|>": 12, "<reponame>": 4}
    found = FimTokens.find(texts.get, 20)
    assert found == FimTokens(pre=10, suf=11, mid=12, rep=4)
    declared = FimTokens.find(texts.get, 20, {"tokenizer.ggml.fim_pre_token_id": 15, "tokenizer.ggml.fim_mid_token_id": 99})
    assert declared is not None and declared.pre == 15 and declared.mid == 12  # 99 is past the vocabulary: ignored
    codellama = {"▁<PRE>": 32007, "▁<SUF>": 32008, "▁<MID>": 32009}
    assert FimTokens.find(codellama.get, 32016) == FimTokens(pre=32007, suf=32008, mid=32009)
    assert FimTokens.find({"<|fim_prefix|>": 1, "<|fim_suffix|>": 2}.get, 10) is None  # no middle: no infill


def test_a_request_fills_in_text_only():
    with pytest.raises(InvalidRequest):
        GenerationRequest(model="m", prompt="", prompt_ids=(1, 2), infill=Infill("a", "b"))


# -- through the port -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def coder_home(tmp_path_factory):
    from engine.catalog.registry import ModelRegistry
    from tests.engine.server import tiny_coder

    if not tiny_coder.MODEL_PATH.exists():
        from engine.starter import starter_model_path

        tiny_coder.build(starter_model_path())
    home = tmp_path_factory.mktemp("coder-home")
    ModelRegistry(home).register(tiny_coder.MODEL_PATH, name=CODER)
    return home


@pytest.fixture(scope="module")
def coder_server(coder_home):
    s = Server("--ctx", "4096", "--parallel", "2", env={"HEARTH_HOME": str(coder_home)})
    yield s
    s.stop()


def _post(server: Server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.root}{path}", json=body, headers=server.headers, timeout=120)


def _expected_ids(server: Server, prefix: str, suffix: str) -> list[int]:
    """The prompt built by hand from the model's own markers and its tokenizer (text read as text)."""
    markers = _post(server, "/tokenize", {"model": CODER, "content": "<|fim_prefix|><|fim_suffix|><|fim_middle|>"}).json()["tokens"]
    assert len(markers) == 3

    def tok(text: str) -> list[int]:
        return _post(server, "/tokenize", {"model": CODER, "content": text, "parse_special": False}).json()["tokens"]

    return [markers[0], *tok(prefix), markers[1], *tok(suffix), markers[2]]


def test_openai_and_ollama_suffix_fill_in_the_middle_from_the_markers(coder_server):
    # code that writes a marker's text is read as text, not as the marker
    prefix = PREFIX + "'<|fim_middle|>' + "
    ids = _expected_ids(coder_server, prefix, SUFFIX)
    plain = _post(coder_server, "/v1/completions", {"model": CODER, "prompt": ids, "max_tokens": 12, "temperature": 0}).json()
    body = {"model": CODER, "prompt": prefix, "suffix": SUFFIX, "max_tokens": 12, "temperature": 0}
    filled = _post(coder_server, "/v1/completions", body).json()
    assert filled["choices"][0]["text"] == plain["choices"][0]["text"] != ""
    assert filled["usage"]["prompt_tokens"] == len(ids)
    with httpx.stream("POST", f"{coder_server.base_url}/completions", json={**body, "stream": True},
                      headers=coder_server.headers, timeout=120) as r:  # fmt: skip
        text = "".join(__import__("json").loads(line[6:])["choices"][0]["text"] for line in r.iter_lines()
                       if line.startswith("data: {"))  # fmt: skip
    assert text == plain["choices"][0]["text"]
    ollama = _post(coder_server, "/api/generate", {"model": CODER, "prompt": prefix, "suffix": SUFFIX, "stream": False,
                                                   "options": {"temperature": 0, "num_predict": 12}}).json()  # fmt: skip
    assert ollama["response"] == plain["choices"][0]["text"]
    assert ollama["prompt_eval_count"] == len(ids)


def test_a_model_without_markers_says_it_does_not_support_insert(coder_server):
    for path, body in [
        ("/v1/completions", {"prompt": "def f():", "suffix": "\n", "max_tokens": 4}),
        ("/api/generate", {"prompt": "def f():", "suffix": "\n", "stream": False}),
    ]:
        r = _post(coder_server, path, {"model": "smollm2-135m-instruct", **body})
        assert r.status_code == 400, r.text
        said = r.json()["error"]
        said = said if isinstance(said, str) else said["message"]
        assert "does not support insert" in said and "code model" in said
    # an empty suffix is none: a plain completion, as OpenAI's
    r = _post(coder_server, "/v1/completions", {"model": "smollm2-135m-instruct", "prompt": "Hi", "suffix": "", "max_tokens": 2})
    assert r.status_code == 200
    r = _post(coder_server, "/v1/completions", {"model": CODER, "prompt": "a", "suffix": "b", "echo": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"


def test_llama_servers_infill_opens_with_the_repository_frame_and_answers_in_its_shape(coder_server):
    frame = _post(coder_server, "/tokenize", {"model": CODER, "content": "<reponame>myproject\n<|file_sep|>util.py\nX = 1\n"
                                                                         "<|file_sep|>filename\n"}).json()["tokens"]  # fmt: skip
    ids = frame + _expected_ids(coder_server, PREFIX, SUFFIX)
    plain = _post(coder_server, "/v1/completions", {"model": CODER, "prompt": ids, "max_tokens": 10, "temperature": 0}).json()
    body = {"model": CODER, "input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 10, "temperature": 0,
            "input_extra": [{"filename": "util.py", "text": "X = 1\n"}], "cache_prompt": True, "samplers": ["top_k"]}  # fmt: skip
    r = _post(coder_server, "/infill", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["content"] == plain["choices"][0]["text"] != ""
    assert out["stop"] is True and out["stop_type"] == "limit" and out["tokens_predicted"] == 10
    assert out["tokens_evaluated"] == len(ids) and out["model"] == CODER
    assert out["timings"]["predicted_n"] == 10 and out["timings"]["prompt_ms"] > 0
    with httpx.stream("POST", f"{coder_server.root}/infill", json={**body, "stream": True}, headers=coder_server.headers,
                      timeout=120) as s:  # fmt: skip
        events = [__import__("json").loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    assert "".join(e["content"] for e in events) == out["content"]
    assert [e["stop"] for e in events][-1] is True and not any(e["stop"] for e in events[:-1])
    assert events[-1]["tokens_evaluated"] == len(ids)
    # n_predict 0: the prompt read into the cache, no answer (a plugin warms the cache so)
    fresh = {**body, "input_prefix": "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = "}
    warm = _post(coder_server, "/infill", {**fresh, "n_predict": 0}).json()
    assert warm["content"] == "" and warm["tokens_predicted"] == 0 and warm["tokens_evaluated"] > len(ids)
    assert warm["timings"]["cache_n"] < len(frame) + 4  # only the frame was read before
    after = _post(coder_server, "/infill", fresh).json()
    assert after["timings"]["cache_n"] > len(frame) + 16 and after["tokens_predicted"] == 10
    assert after["tokens_cached"] == after["tokens_evaluated"] + 9  # the cache after (not the last token), as llama-server's


def test_llama_servers_completion_takes_text_or_token_ids(coder_server):
    text = "def main():\n    "
    plain = _post(coder_server, "/v1/completions", {"model": CODER, "prompt": text, "max_tokens": 8, "temperature": 0}).json()
    out = _post(coder_server, "/completion", {"model": CODER, "prompt": text, "n_predict": 8, "temperature": 0}).json()
    assert out["content"] == plain["choices"][0]["text"]
    ids = _post(coder_server, "/tokenize", {"model": CODER, "content": text}).json()["tokens"]
    by_ids = _post(coder_server, "/completion", {"model": CODER, "prompt": ids, "n_predict": 8, "temperature": 0,
                                                 "return_tokens": True, "n_probs": 2}).json()  # fmt: skip
    assert by_ids["content"] == out["content"] and len(by_ids["tokens"]) == 8
    assert len(by_ids["completion_probabilities"]) == 8 and len(by_ids["completion_probabilities"][0]["top_logprobs"]) == 2
    for step, token in zip(by_ids["completion_probabilities"], by_ids["tokens"], strict=True):  # greedy: the best is it
        best = step["top_logprobs"][0]
        assert best["id"] == step["id"] == token and best["token"] == step["token"]
    assert by_ids["truncated"] is False  # n_predict ended it
    full = _post(coder_server, "/completion", {"model": CODER, "prompt": ids * (4090 // len(ids)), "temperature": 0,
                                               "ignore_eos": True}).json()  # fmt: skip
    assert full["truncated"] is True and full["stop_type"] == "limit"  # the slot's context (4,096) ended it
    assert full["tokens_evaluated"] + full["tokens_predicted"] >= 4095
    r = _post(coder_server, "/infill", {"model": "smollm2-135m-instruct", "input_prefix": "a", "input_suffix": "b"})
    assert r.status_code == 400 and "does not support insert" in r.json()["error"]["message"]
    r = _post(coder_server, "/infill", {"model": CODER, "input_prefix": "a"})
    assert r.status_code == 400  # input_suffix is required, as llama-server's


def test_llama_servers_time_and_indent_limits_end_the_answer():
    from engine.server.llama_routes import InfillBody, _Limits

    def limits(**kw) -> _Limits:
        return _Limits(InfillBody(input_prefix="", input_suffix="", **kw))

    indent = limits(n_indent=4)
    assert indent.take("    x = 1\n", 0.0) == ("    x = 1\n", False)
    assert indent.take("  ", 0.1) == ("  ", False)  # its first character is still to come
    assert indent.take("    y", 0.2) == ("    y", False)  # indented enough: goes on
    assert indent.take("\n  z", 0.3) == ("\n  ", True)  # a line indented less: cut at its first character
    several = limits(n_indent=4)  # several lines in one piece (a reader that fell behind): each is checked
    assert several.take("    a\nx\n    b", 0.0) == ("    a\n", True)
    blank = limits(n_indent=4)  # a blank line ends it too, as llama-server's
    assert blank.take("    a\n\n    b", 0.0) == ("    a\n", True)
    timed = limits(t_max_predict_ms=100)
    assert timed.take("a", 1.0) == ("a", False)
    assert timed.take("b\nc", 1.05) == ("b\nc", False)  # within the time
    assert timed.take("d", 1.5) == ("d", False)  # past it, but mid-line: the answer ends with whole lines
    assert timed.take("e\n", 1.6) == ("e\n", True)


def test_the_paged_and_mlx_vocabulary_builds_llama_cpps_prompt():
    """The paged engine and MLX build the prompt from engine.gguf's Vocabulary, llama.cpp from its own: the same
    markers and the same ids (the paged server's answer through the port was checked the same way by hand: a
    server costs 16 s of the suite)."""
    from engine.backends.llamacpp.model import GGUFModel
    from engine.gguf import read_metadata, vocabulary_from_gguf
    from tests.engine.server import tiny_coder

    path = tiny_coder.MODEL_PATH
    model = GGUFModel(path)
    try:
        vocab = vocabulary_from_gguf(path, read_metadata(path))
        assert vocab.fim == model.fim and vocab.fim is not None
        for infill in [Infill(PREFIX + "'<|fim_middle|>'", SUFFIX), Infill("", "x", (("a.py", "<|file_sep|>"),), project=True)]:
            ours = infill_tokens(infill, "pr", fim=vocab.fim, encode=lambda t: vocab.encode(t, parse_special=False),
                                 bos=None, n_ctx=4096)  # fmt: skip
            theirs = infill_tokens(infill, "pr", fim=model.fim, encode=lambda t: model.tokenize(t, parse_special=False),
                                   bos=None, n_ctx=4096)  # fmt: skip
            assert ours == theirs
        # a long file is read from the end that is kept: the same tokens as the whole file's
        source = "".join(f"def f{i}(x):\n    return x * {i} + len('{'y' * (i % 7)}')\n\n" for i in range(3000))
        encode = lambda t: vocab.encode(t, parse_special=False)  # noqa: E731
        ids = infill_tokens(Infill(source, source), "", fim=vocab.fim, encode=encode, bos=None, n_ctx=32768)
        pre, suf = ids.index(vocab.fim.pre), ids.index(vocab.fim.suf)
        assert ids[pre + 1 : suf] == encode(source)[-1536:] and ids[suf + 1 : -1] == encode(source)[:510]
    finally:
        model.close()



def test_ollama_lists_insert_for_a_model_with_the_markers(coder_server):
    caps = {name: _post(coder_server, "/api/show", {"model": name}).json()["capabilities"]
            for name in (CODER, "smollm2-135m-instruct")}  # fmt: skip
    assert "insert" in caps[CODER] and "insert" not in caps["smollm2-135m-instruct"]
    assert "completion" in caps[CODER]


def test_a_folder_models_markers_are_read_from_its_tokenizer_files(tmp_path):
    from engine.infill import file_has_markers

    added = [{"id": 10 + i, "content": t, "special": True} for i, t in enumerate(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"])]
    (tmp_path / "tokenizer.json").write_text(__import__("json").dumps({"added_tokens": added, "model": {"vocab": {}}}))
    assert file_has_markers(tmp_path)
    (tmp_path / "tokenizer.json").write_text(__import__("json").dumps({"added_tokens": added[:2]}))
    assert not file_has_markers(tmp_path) and not file_has_markers(tmp_path / "missing.gguf")


def test_an_infill_without_a_model_goes_to_the_code_model_after_a_chat(coder_server):
    assert _post(coder_server, "/infill", {"model": CODER, "input_prefix": "a", "input_suffix": "b", "n_predict": 1}).status_code == 200
    chat = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    assert _post(coder_server, "/v1/chat/completions", chat).status_code == 200  # the chat model is the latest used now
    out = _post(coder_server, "/infill", {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 2}).json()
    assert out["model"] == CODER and out["tokens_predicted"] == 2
    # Ollama's suffix with an empty prompt (the cursor at the file's start) is still filled in
    top = _post(coder_server, "/api/generate", {"model": CODER, "prompt": "", "suffix": "import os\n", "stream": False,
                                                "options": {"temperature": 0, "num_predict": 3}}).json()  # fmt: skip
    assert top["done_reason"] != "load" and top["eval_count"] == 3


def test_llama_servers_props_give_the_context_slots_and_template(coder_server):
    r = httpx.get(f"{coder_server.root}/props", params={"model": CODER}, headers=coder_server.headers, timeout=60)
    assert r.status_code == 200, r.text
    props = r.json()
    assert props["default_generation_settings"]["n_ctx"] == 4096 and props["total_slots"] == 2
    assert props["model_alias"] == CODER and props["modalities"] == {"vision": False, "audio": False}
    assert "<|im_start|>" in props["chat_template"]  # SmolLM2's, carried into the code model's GGUF
    missing = httpx.get(f"{coder_server.root}/props", params={"model": "no-such-model"}, headers=coder_server.headers)
    assert missing.status_code == 404
