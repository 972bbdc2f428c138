"""Ollama's ``/api/embed`` options through the official ``ollama`` client: ``truncate`` (on by default: an input
longer than the context is cut to fit; off: a 400 naming the limit) and ``dimensions`` (the vector cut and
normalised again; outside 1..size a 400). On the small server (512 tokens of context): the starter model (a
decoder, whose BOS opens the input) and the tiny reranker (an encoder, whose input closes with [SEP])."""

from __future__ import annotations

import json
import math

import httpx
import ollama
import pytest

from tests.engine.server.conftest import MODEL, RERANKER

CTX = 512


@pytest.fixture(scope="module")
def client(small_server):
    return ollama.Client(host=small_server.root, headers=small_server.headers, timeout=120)


def _tokens(server, model: str, text: str, *, add_special: bool = False) -> list[int]:
    body = {"model": model, "content": text, "add_special": add_special}
    return httpx.post(f"{server.root}/tokenize", json=body, headers=server.headers).json()["tokens"]


def test_a_long_input_is_cut_to_the_context_its_closing_token_kept(small_server, client):
    long = "bear " * (CTX + 100)
    words = _tokens(small_server, RERANKER, long, add_special=True)  # [CLS] bear ... bear [SEP]
    assert len(words) == CTX + 102
    prefix = "bear " * (CTX - 2)  # what fits between [CLS] and [SEP]
    assert _tokens(small_server, RERANKER, prefix, add_special=True) == words[: CTX - 1] + words[-1:]
    cut = client.embed(model=RERANKER, input=long)
    same = client.embed(model=RERANKER, input=prefix, truncate=False)
    assert cut.prompt_eval_count == same.prompt_eval_count == CTX
    assert max(abs(a - b) for a, b in zip(cut.embeddings[0], same.embeddings[0], strict=True)) < 1e-6


def test_a_decoders_long_input_is_cut_to_the_context(client):
    long = "red" + " red" * (CTX + 50)
    cut = client.embed(model=MODEL, input=long)  # the equality with its prefix is checked on the encoder above
    assert cut.prompt_eval_count == CTX and abs(sum(v * v for v in cut.embeddings[0]) - 1.0) < 1e-6


def test_without_truncate_a_long_input_is_a_400_naming_the_limit(client):
    for model, long in ((MODEL, "red" + " red" * (CTX + 10)), (RERANKER, "bear " * (CTX + 10))):
        with pytest.raises(ollama.ResponseError) as err:
            client.embed(model=model, input=["red", long], truncate=False)
        assert err.value.status_code == 400
        assert f"but model '{model}' takes at most {CTX}; shorten it, or leave 'truncate' on" in err.value.error


def test_dimensions_cut_and_normalise_and_bad_ones_are_400s(client):
    full = client.embed(model=MODEL, input="a blue car").embeddings[0]
    size = len(full)
    short = client.embed(model=MODEL, input="a blue car", dimensions=32).embeddings[0]
    norm = math.sqrt(sum(v * v for v in full[:32]))
    assert len(short) == 32 and max(abs(s - v / norm) for s, v in zip(short, full[:32], strict=True)) < 1e-6
    assert client.embed(model=MODEL, input="a blue car", dimensions=size).embeddings[0] == pytest.approx(full, abs=1e-7)
    for bad in (0, -3, size + 1):
        with pytest.raises(ollama.ResponseError) as err:
            client.embed(model=MODEL, input="a blue car", dimensions=bad)
        assert err.value.status_code == 400
        assert err.value.error == (
            f"Model '{MODEL}' makes {size}-dimensional embeddings; set 'dimensions' from 1 to {size}."
        )


def test_a_lone_surrogate_is_embedded_not_a_server_error(small_server):
    # JSON can carry "\ud800", which has no UTF-8 form; it is read as U+FFFD, the replacement character
    body = json.dumps({"model": MODEL, "input": "red \ud800 car"})  # JSON's own "\ud800" escape
    headers = {**small_server.headers, "Content-Type": "application/json"}
    r = httpx.post(f"{small_server.root}/api/embed", content=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    same = httpx.post(f"{small_server.root}/api/embed", json={"model": MODEL, "input": "red \ufffd car"}, headers=headers)
    assert r.json()["embeddings"] == same.json()["embeddings"]


def test_openais_dimensions_cut_the_same_way(small_server, client):
    import openai

    oai = openai.OpenAI(base_url=small_server.base_url, api_key=small_server.api_key or "none", max_retries=0)
    short = oai.embeddings.create(model=MODEL, input="a blue car", dimensions=32).data[0].embedding
    assert short == pytest.approx(client.embed(model=MODEL, input="a blue car", dimensions=32).embeddings[0], abs=1e-6)
    with pytest.raises(openai.BadRequestError) as err:
        oai.embeddings.create(model=MODEL, input="a blue car", dimensions=100_000)
    assert err.value.body["param"] == "dimensions" and "set 'dimensions' from 1 to" in err.value.body["message"]
