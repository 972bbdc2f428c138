"""``POST /v1/rerank`` and ``/rerank`` on a real `hearth serve` with a tiny random-weight reranker (a GGUF made
by llama.cpp's own converter, tests/engine/server/tiny_reranker.py), checked against transformers' logits for
the same pairs, and against llama-server ``--reranking`` where one is built."""

from __future__ import annotations

import json

import httpx
import pytest

from engine.limits import MAX_RERANK_DOCUMENTS
from engine.server.access import Access, route_access
from tests.engine.server import tiny_reranker
from tests.engine.server.conftest import MODEL, RERANKER
from tests.engine.server.llama_server import llama_server, needs_llama_server

QUERY = "what is a panda?"
DOCUMENTS = [
    "the giant panda is a bear that lives in china.",
    "paris is the capital of france.",
    "Pandas eat bamboo in the forest!",
    "many people read books on the train.",
    "a small cat and a large dog.",
    "what is the blue sky?",
]


@pytest.fixture(scope="module")
def references():
    """transformers' logits for (query, document) pairs: the model as it is, and the same model with the
    GELU llama.cpp's CPU kernels compute (tanh-approximated, read from a table of f16 values)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_reranker.HF_DIR)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tiny_reranker.HF_DIR).eval()

    def logits(query: str, documents: list[str]) -> tuple[list[float], int]:
        enc = [tokenizer(query, d, return_token_type_ids=False)["input_ids"] for d in documents]
        with torch.no_grad():
            out = [model(input_ids=torch.tensor([ids])).logits[0, 0].item() for ids in enc]
        return out, sum(len(ids) for ids in enc)

    class GgmlGelu(torch.nn.Module):
        def forward(self, x):
            h = x.half().float()
            y = (0.5 * h * (1 + torch.tanh(0.7978845608028654 * h * (1 + 0.044715 * h * h)))).half().float()
            return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    torch.set_num_threads(1)
    exact = logits(QUERY, DOCUMENTS)
    layers = model.roberta.encoder.layer
    originals = [layer.intermediate.intermediate_act_fn for layer in layers]
    for layer in layers:
        layer.intermediate.intermediate_act_fn = GgmlGelu()
    ggml = logits(QUERY, DOCUMENTS)
    for layer, act in zip(layers, originals, strict=True):
        layer.intermediate.intermediate_act_fn = act
    return exact, ggml


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.root}{path}", json=body, headers=server.headers, timeout=120)


def test_scores_equal_transformers_logits_best_first(small_server, references):
    (exact, n_tokens), (ggml, _) = references
    r = _post(small_server, "/v1/rerank", {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == RERANKER and body["object"] == "list"
    assert body["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}  # [CLS] q [SEP] d [SEP] each
    results = body["results"]
    assert sorted(item["index"] for item in results) == list(range(len(DOCUMENTS)))
    scores = [item["relevance_score"] for item in results]
    assert scores == sorted(scores, reverse=True)
    by_index = {item["index"]: item["relevance_score"] for item in results}
    # the same network: llama.cpp's GELU comes from an f16 table, the rest is f32 as in transformers
    assert max(abs(by_index[i] - ggml[i]) for i in range(len(DOCUMENTS))) < 1e-4
    assert max(abs(by_index[i] - exact[i]) for i in range(len(DOCUMENTS))) < 1e-3
    assert [item["index"] for item in results] == sorted(range(len(DOCUMENTS)), key=lambda i: -exact[i])
    assert all("document" not in item for item in results)


def test_jina_and_cohere_bodies_on_both_paths(small_server):
    docs = [{"text": d} for d in DOCUMENTS]
    plain = _post(small_server, "/v1/rerank", {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS}).json()
    r = _post(small_server, "/rerank", {"model": RERANKER, "query": QUERY, "documents": docs, "top_n": 2,
                                         "return_documents": True})  # fmt: skip
    assert r.status_code == 200, r.text
    top = r.json()["results"]
    assert [(t["index"], t["relevance_score"]) for t in top] == [
        (p["index"], p["relevance_score"]) for p in plain["results"][:2]
    ]
    assert [t["document"] for t in top] == [{"text": DOCUMENTS[t["index"]]} for t in top]


def test_a_model_that_is_not_a_reranker_and_bad_bodies_are_400s(small_server):
    r = _post(small_server, "/v1/rerank", {"model": MODEL, "query": QUERY, "documents": DOCUMENTS})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        f"Model '{MODEL}' is not a reranker; name a GGUF reranker model (a cross-encoder such as bge-reranker)."
    )
    many = _post(small_server, "/v1/rerank", {"model": RERANKER, "query": "q", "documents": ["d"] * (MAX_RERANK_DOCUMENTS + 1)})
    assert many.status_code == 400 and f"At most {MAX_RERANK_DOCUMENTS} documents" in many.json()["error"]["message"]
    for body in ({"model": RERANKER, "query": QUERY, "documents": []},
                 {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS, "top_n": 0},
                 {"model": RERANKER, "documents": DOCUMENTS}):  # fmt: skip
        assert _post(small_server, "/v1/rerank", body).status_code == 400, body
    long = _post(small_server, "/v1/rerank", {"model": RERANKER, "query": QUERY, "documents": ["bear " * 600]})
    assert long.status_code == 400 and "context holds 512" in long.json()["error"]["message"]
    body = json.dumps({"model": RERANKER, "query": "\ud800", "documents": ["x"]})  # JSON's own "\ud800" escape
    headers = {**small_server.headers, "Content-Type": "application/json"}
    surrogate = httpx.post(f"{small_server.root}/v1/rerank", content=body, headers=headers, timeout=60)
    assert surrogate.status_code == 200, surrogate.text  # a lone surrogate, which has no UTF-8 form, reads as U+FFFD


def test_the_reranker_tokenizes_with_its_own_special_tokens(small_server):
    r = _post(small_server, "/tokenize", {"model": RERANKER, "content": "giant panda", "add_special": True,
                                           "with_pieces": True})  # fmt: skip
    pieces = [t["piece"] for t in r.json()["tokens"]]
    assert pieces == ["[CLS]", " giant", " panda", "[SEP]"]


def test_the_new_routes_need_an_inference_key():
    for path in ("/v1/rerank", "/rerank", "/tokenize", "/detokenize"):
        assert route_access("POST", path) is Access.INFERENCE


@needs_llama_server
def test_scores_equal_llama_servers(small_server, reranker_gguf):
    body = {"query": QUERY, "documents": DOCUMENTS}
    with llama_server(reranker_gguf, "--reranking", "-c", "512", "-fa", "off") as url:
        theirs = httpx.post(f"{url}/v1/rerank", json=body, timeout=60).json()
    ours = _post(small_server, "/v1/rerank", {"model": RERANKER, **body}).json()
    assert [t["index"] for t in ours["results"]] == [t["index"] for t in theirs["results"]]
    for a, b in zip(ours["results"], theirs["results"], strict=True):
        assert abs(a["relevance_score"] - b["relevance_score"]) < 1e-4
    assert ours["usage"] == theirs["usage"]


def test_a_reranker_asked_for_an_answer_says_what_it_is_for_in_every_dialect(small_server):
    said = (f"Model '{RERANKER}' is a reranker: it scores documents against a query (POST /v1/rerank) and cannot "
            "write answers; name a chat model.")  # fmt: skip
    ask = [{"role": "user", "content": "hi"}]
    for path, body in (
        ("/v1/chat/completions", {"model": RERANKER, "messages": ask, "max_tokens": 4}),
        ("/v1/chat/completions", {"model": RERANKER, "messages": ask, "max_tokens": 4, "stream": True}),
        ("/v1/completions", {"model": RERANKER, "prompt": "hi", "max_tokens": 4}),
        ("/v1/messages", {"model": RERANKER, "messages": ask, "max_tokens": 4}),
        ("/v1/responses", {"model": RERANKER, "input": "hi", "max_output_tokens": 16}),
    ):
        r = _post(small_server, path, body)
        assert r.status_code == 400, (path, r.text)
        assert said in r.text, (path, r.text)
    r = _post(small_server, "/api/chat", {"model": RERANKER, "messages": ask, "stream": False})
    assert r.status_code == 400 and r.json()["error"] == said


def test_bench_with_no_model_named_picks_the_chat_model_not_the_reranker(small_server):
    from engine.bench.errors import BenchError
    from engine.bench.servers import probe_server

    r = httpx.post(f"{small_server.root}/api/models/unload", json={"model": MODEL}, headers=small_server.headers, timeout=60)
    assert r.status_code == 200, r.text
    assert _post(small_server, "/v1/rerank", {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS}).status_code == 200
    with pytest.raises(BenchError, match=r"has no chat model loaded \(tiny-reranker only rank or embed\); name one"):
        probe_server(small_server.base_url, label="hearth", api_key=small_server.api_key, model=None)
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    assert _post(small_server, "/v1/chat/completions", ask).status_code == 200  # loaded after the reranker
    info = probe_server(small_server.base_url, label="hearth", api_key=small_server.api_key, model=None)
    assert (info.model, info.quantization) == (MODEL, "Q4_1")
