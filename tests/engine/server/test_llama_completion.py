"""llama-server's ``POST /completion`` as its clients read it, on the starter model."""

from __future__ import annotations

import json

import httpx

from tests.engine.server.conftest import MODEL


def _post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.root}{path}", json=body, headers=server.headers, timeout=120)


def test_a_prompt_of_token_ids_and_texts_is_read_as_one_prompt(server):
    """As llama-server's ``tokenize_mixed``: each text's tokens in its place, so ids and texts give the same
    answer as the whole text."""
    ask = {"model": MODEL, "n_predict": 6, "temperature": 0, "return_tokens": True}
    ids = _post(server, "/tokenize", {"model": MODEL, "content": "The capital of France"}).json()["tokens"]
    whole = _post(server, "/completion", {**ask, "prompt": "The capital of France is"}).json()
    mixed = _post(server, "/completion", {**ask, "prompt": [*ids, " is"]}).json()
    assert mixed["tokens_evaluated"] == whole["tokens_evaluated"]
    assert (mixed["content"], mixed["tokens"]) == (whole["content"], whole["tokens"])
    wrong = _post(server, "/completion", {**ask, "prompt": [*ids, {"text": " is"}]})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "prompt"


def test_the_answer_counts_the_cache_as_llama_server_does(server):
    """``tokens_cached`` is what the slot's cache holds after: the prompt and every token drawn but the last,
    which is never read (llama-server: 5 prompt tokens and 16 drawn leave 20)."""
    out = _post(server, "/completion", {"model": MODEL, "prompt": "The capital of France is", "n_predict": 16,
                                        "temperature": 0, "ignore_eos": True}).json()  # fmt: skip
    assert (out["tokens_evaluated"], out["tokens_predicted"], out["tokens_cached"]) == (5, 16, 20)


def test_the_model_list_is_at_llama_servers_other_path_too(server):
    """llama-server lists its models at ``/models`` as at ``/v1/models``; a client of it asks either."""
    listed = httpx.get(f"{server.root}/models", headers=server.headers, timeout=30)
    assert listed.status_code == 200
    assert listed.json() == httpx.get(f"{server.base_url}/models", headers=server.headers, timeout=30).json()
    assert MODEL in [m["id"] for m in listed.json()["data"]]
    assert httpx.get(f"{server.root}/models", timeout=30).status_code == 401  # a key needed, as for /v1/models


def test_each_dialect_reads_the_penalties_as_its_peers_do(server):
    """llama-server's /completion and Ollama read the last 64 tokens of prompt and answer (repeat_last_n), OpenAI's
    routes the answer only unless repeat_last_n is given: the first token, " y", is in the prompt alone."""
    prompt, pen = "x, y, x, y, x, y, x,", {"presence_penalty": 2.0, "frequency_penalty": 2.0}

    def completion(**more) -> str:
        return _post(server, "/completion", {"prompt": prompt, "n_predict": 1, "temperature": 0, **pen, **more}).json()["content"]

    def ollama(**more) -> str:
        options = {"num_predict": 1, "temperature": 0, **pen, **more}
        return _post(server, "/api/generate", {"model": MODEL, "prompt": prompt, "raw": True, "stream": False,
                                               "options": options}).json()["response"]  # fmt: skip

    def openai(**more) -> str:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0, **pen, **more}
        return _post(server, "/v1/completions", body).json()["choices"][0]["text"]

    plain = completion(presence_penalty=0.0, frequency_penalty=0.0)
    assert plain == " y"
    assert completion() != plain and completion(repeat_last_n=0) == plain
    assert ollama() != plain and ollama(repeat_last_n=0) == plain
    assert openai() == plain and openai(repeat_last_n=64) != plain


def test_min_tokens_runs_the_answer_on_past_its_end_and_its_stop_strings(server):
    client = server.client()
    ask = [{"role": "user", "content": "What colour is the sky? Answer in one word."}]
    short = client.chat.completions.create(model=MODEL, messages=ask, temperature=0, max_tokens=60)
    assert short.choices[0].finish_reason == "stop" and short.usage is not None
    n = short.usage.completion_tokens
    longer = client.chat.completions.create(model=MODEL, messages=ask, temperature=0, max_tokens=60,
                                            extra_body={"min_tokens": n + 5})  # fmt: skip
    assert longer.usage is not None and longer.usage.completion_tokens >= n + 5
    body = {"model": MODEL, "prompt": "1, 2, 3, 4, 5,", "max_tokens": 8, "temperature": 0, "stop": [","]}
    assert _post(server, "/v1/completions", body).json()["choices"][0]["text"] == " 6"
    held = _post(server, "/v1/completions", {**body, "min_tokens": 3}).json()["choices"][0]
    assert held["text"] == " 6, 7" and held["finish_reason"] == "stop"  # the first "," past 3 tokens ends it
    for bad in ({"min_tokens": 9}, {"min_tokens": -1}, {"min_tokens": 20, "max_tokens": None}):
        r = _post(server, "/v1/completions", {**body, **bad})
        assert r.status_code == 400 and "min_tokens" in r.text, bad


def test_include_stop_str_in_output_keeps_the_stop_string_that_ended_the_answer(server):
    body = {"model": MODEL, "prompt": "1, 2, 3, 4, 5,", "max_tokens": 8, "temperature": 0, "stop": [","]}
    plain = _post(server, "/v1/completions", body).json()["choices"][0]
    kept = _post(server, "/v1/completions", {**body, "include_stop_str_in_output": True}).json()["choices"][0]
    assert plain["finish_reason"] == kept["finish_reason"] == "stop"
    assert plain["text"] == " 6" and kept["text"] == " 6,"
    # streamed: the answer ends with the stop string, its first "e" (an English answer has one within 16 tokens,
    # whatever words the greedy path takes on this server's cache)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Count: one, two, three"}], "max_tokens": 16,
            "temperature": 0, "stop": ["e"], "include_stop_str_in_output": True, "stream": True}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=chat, headers=server.headers, timeout=120) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "stop"
    assert text.endswith("e") and "e" not in text[:-1], text


def test_a_temperature_over_two_is_taken_as_llama_server_takes_it_and_openais_routes_refuse_it(server):
    hot = _post(server, "/completion", {"model": MODEL, "prompt": "Name a colour.", "n_predict": 5, "temperature": 3.5,
                                        "seed": 7, "ignore_eos": True})  # fmt: skip
    assert hot.status_code == 200 and hot.json()["tokens_predicted"] == 5, hot.text
    assert _post(server, "/completion", {"model": MODEL, "prompt": "x", "temperature": -0.5}).status_code == 400
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/responses", {"input": "hi"})):  # fmt: skip
        r = _post(server, path, {"model": MODEL, "temperature": 3.5, "max_tokens": 2, **body})
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature", r.text
