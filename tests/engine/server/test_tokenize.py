"""``POST /tokenize`` and ``/detokenize`` in llama-server's shapes, against llama-cpp-python's own
``Llama.tokenize`` and ``Llama.detokenize`` on the starter model, and against llama-server where one is built."""

from __future__ import annotations

import httpx
import pytest

from tests.engine.server.conftest import MODEL
from tests.engine.server.llama_server import llama_server, needs_llama_server

TEXT = "Hello, world! Ünïcödé and a llama 🦙 in 東京.<|im_start|>"


@pytest.fixture(scope="module")
def vocab(starter_path):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(starter_path), vocab_only=True, verbose=False)
    yield llm
    llm.close()


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.root}{path}", json=body, headers=server.headers, timeout=120)


@pytest.mark.parametrize(("add_special", "parse_special"), [(False, True), (True, True), (False, False)])
def test_tokens_are_llama_cpps(server, vocab, add_special, parse_special):
    r = _post(server, "/tokenize", {"model": MODEL, "content": TEXT, "add_special": add_special,
                                    "parse_special": parse_special})  # fmt: skip
    assert r.status_code == 200, r.text
    expected = vocab.tokenize(TEXT.encode(), add_bos=add_special, special=parse_special)
    assert r.json() == {"tokens": expected}


def test_special_tokens_are_parsed_unless_asked_not_to(server):
    parsed = _post(server, "/tokenize", {"model": MODEL, "content": "<|im_start|>"}).json()["tokens"]
    literal = _post(server, "/tokenize", {"model": MODEL, "content": "<|im_start|>", "parse_special": False}).json()
    assert len(parsed) == 1 and len(literal["tokens"]) > 1


def test_pieces_give_a_split_character_as_its_bytes(server, vocab):
    r = _post(server, "/tokenize", {"model": MODEL, "content": TEXT, "with_pieces": True})
    items = r.json()["tokens"]
    assert [t["id"] for t in items] == vocab.tokenize(TEXT.encode(), add_bos=False, special=True)
    raw = b""
    for item in items:
        piece = item["piece"]
        expected = vocab.detokenize([item["id"]], special=True)
        if isinstance(piece, list):  # not UTF-8 on its own: part of a character split over tokens
            assert bytes(piece) == expected and all(0 <= b < 256 for b in piece)
            with pytest.raises(UnicodeDecodeError):
                expected.decode("utf-8")
            raw += bytes(piece)
        else:
            assert piece.encode() == expected
            raw += expected
    assert raw == TEXT.encode()
    assert any(isinstance(item["piece"], list) for item in items)  # 🦙 or 東 is cut over byte tokens


def test_detokenize_is_llama_cpps_and_round_trips(server, vocab):
    tokens = vocab.tokenize(TEXT.encode(), add_bos=False, special=True)
    r = _post(server, "/detokenize", {"model": MODEL, "tokens": tokens})
    assert r.status_code == 200
    assert r.json() == {"content": vocab.detokenize(tokens, special=True).decode()} == {"content": TEXT}


def test_the_model_defaults_to_the_loaded_one_and_bad_ids_are_400s(server, vocab):
    # the session's server is shared: its idle timer or a test elsewhere may have unloaded the model since
    assert _post(server, "/tokenize", {"model": MODEL, "content": "x"}).status_code == 200
    tokens = _post(server, "/tokenize", {"content": "Hi there"}).json()["tokens"]
    assert tokens == vocab.tokenize(b"Hi there", add_bos=False, special=True)
    assert _post(server, "/detokenize", {"tokens": tokens}).json() == {"content": "Hi there"}
    for bad in ([-1], [vocab.n_vocab()]):
        r = _post(server, "/detokenize", {"model": MODEL, "tokens": bad})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == (
            f"Token {bad[0]} is not in this model's vocabulary (ids 0 to {vocab.n_vocab() - 1})."
        )
    assert _post(server, "/tokenize", {"model": "no-such-model", "content": "x"}).status_code == 404


@needs_llama_server
def test_answers_equal_llama_servers(server, starter_path):
    bodies = [("/tokenize", {"content": TEXT, "with_pieces": True}), ("/tokenize", {"content": TEXT, "add_special": True}),
              ("/tokenize", {"content": TEXT, "parse_special": False}), ("/detokenize", {"tokens": [19556, 15107, 116, 243]}),
              ("/apply-template", {"messages": [{"role": "user", "content": TEXT}]}),
              ("/apply-template", {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]})]  # fmt: skip
    with llama_server(starter_path, "-c", "512") as url:
        theirs = [httpx.post(f"{url}{path}", json=body, timeout=60).json() for path, body in bodies]
    ours = [_post(server, path, {"model": MODEL, **body}).json() for path, body in bodies]
    assert ours == theirs


def test_llama_servers_other_routes_read_any_body_as_json(server):
    """As llama-server: a body is read as JSON whatever its content type (``curl -d`` sends a form's); its second
    health path; the prompt a chat makes in the model's template; pooled embeddings in its own shape."""
    form = {**server.headers, "Content-Type": "application/x-www-form-urlencoded"}
    sent = httpx.post(f"{server.root}/tokenize", content=f'{{"model": "{MODEL}", "content": "Hello"}}', headers=form, timeout=60)
    assert sent.status_code == 200 and sent.json() == _post(server, "/tokenize", {"model": MODEL, "content": "Hello"}).json()
    assert httpx.get(f"{server.root}/v1/health", timeout=30).json()["status"] == "ok"  # open, as /health
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prompt = _post(server, "/apply-template", {"model": MODEL, "messages": messages}).json()["prompt"]
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    texts = ["a llama", "東京"]
    native = httpx.post(f"{server.root}/embedding", content=f'{{"model": "{MODEL}", "content": ["a llama", "東京"]}}',
                        headers=form, timeout=120).json()  # fmt: skip
    openai = httpx.post(f"{server.base_url}/embeddings", json={"model": MODEL, "input": texts}, headers=server.headers,
                        timeout=120).json()  # fmt: skip
    assert [(e["index"], e["embedding"]) for e in native] == [(d["index"], [d["embedding"]]) for d in openai["data"]]
    refused = _post(server, "/embedding", {"model": MODEL, "content": ""})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "content"


def test_llama_servers_completion_follows_a_json_schema_and_token_biases(server):
    """``/completion`` as llama-server reads it: ``json_schema`` (or ``response_format``) holds the text to the
    schema, ``logit_bias`` pairs ids with biases (``false`` bans one); a GBNF ``grammar`` is
    held (tests/engine/server/test_structured_output.py), or a 400 naming it when it cannot be read."""
    import json

    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}}, "required": ["answer"]}
    ask = {"model": MODEL, "prompt": "Is the sky blue? Answer in JSON:", "n_predict": 40, "temperature": 0}
    for constraint in ({"json_schema": schema}, {"response_format": {"type": "json_object", "schema": schema}},
                       {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}):  # fmt: skip
        out = _post(server, "/completion", {**ask, **constraint}).json()
        assert json.loads(out["content"])["answer"] in ("yes", "no"), out["content"]
    free = _post(server, "/completion", {**ask, "n_predict": 1, "return_tokens": True}).json()["tokens"]
    for bias in ([[free[0], False]], {str(free[0]): -1000}):
        banned = _post(server, "/completion", {**ask, "n_predict": 1, "return_tokens": True, "logit_bias": bias}).json()
        assert banned["tokens"] and banned["tokens"][0] != free[0]
    for wrong, param in (({"grammar": 'root ::= "yes'}, "grammar"), ({"logit_bias": [["yes", 1]]}, "logit_bias"),
                         ({"logit_bias": [[1, "high"]]}, "logit_bias")):  # fmt: skip
        r = _post(server, "/completion", {**ask, **wrong})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
