"""``/v1/completions`` with token-id prompts, and ``echo`` with ``logprobs``: the prompt's own tokens and their
log-probabilities, as OpenAI's legacy API and evaluation harnesses (lm-evaluation-harness's
``local-completions``) read them; the values are llama.cpp's own."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from tests.engine.server.conftest import MODEL

TEXT = "Water boils at one hundred degrees Celsius at sea level, and freezes at zero."


def _post(server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.root}/v1/completions", json={"model": MODEL, **body}, headers=server.headers, timeout=600)


def _ids(server, text: str) -> list[int]:
    r = httpx.post(f"{server.root}/tokenize", json={"model": MODEL, "content": text}, headers=server.headers, timeout=60)
    return r.json()["tokens"]


def test_echo_with_logprobs_gives_the_prompts_tokens_first_as_the_openai_client_reads_them(server):
    r = server.client().with_options(timeout=600).completions.create(
        model=MODEL, prompt=TEXT, max_tokens=2, temperature=0, logprobs=2, echo=True
    )
    lp = r.choices[0].logprobs
    ids = _ids(server, TEXT)
    assert r.choices[0].text.startswith(TEXT) and len(lp.tokens) == len(ids) + 2
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing comes before the first token
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    assert all(len(top) <= 2 and max(top.values()) >= v - 1e-9 for top, v in zip(lp.top_logprobs[1:], lp.token_logprobs[1:], strict=True))
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert r.usage.prompt_tokens == len(ids)


def test_prompt_logprobs_are_llama_cpps_own(server, starter_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    ids = _ids(server, TEXT)
    body = _post(server, {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 0, "echo": True}).json()
    ours = body["choices"][0]["logprobs"]["token_logprobs"][1 : len(ids)]
    # the reference: llama.cpp's logits for every position of the same tokens, read 16 at a time with flash
    # attention, as Hearth reads a scored prompt
    ref = llama_cpp.Llama(str(starter_path), logits_all=True, n_ctx=256, n_batch=16, n_ubatch=16, flash_attn=True,
                          verbose=False)  # fmt: skip
    try:
        ref.eval(ids)
        scores = np.asarray(ref.scores[: len(ids)], dtype=np.float64)
    finally:
        ref.close()
    top = scores.max(1, keepdims=True)
    logp = scores - top - np.log(np.exp(scores - top).sum(1, keepdims=True))
    expected = [logp[i, ids[i + 1]] for i in range(len(ids) - 1)]
    assert np.abs(np.array(ours) - np.array(expected)).max() < 0.02


def test_a_prompt_of_token_ids_is_read_as_those_tokens_and_echoed_as_their_text(server):
    ids = _ids(server, TEXT)
    as_ids = _post(server, {"prompt": ids, "max_tokens": 4, "temperature": 0, "echo": True}).json()
    as_text = _post(server, {"prompt": TEXT, "max_tokens": 4, "temperature": 0, "echo": True}).json()
    assert as_ids["choices"][0]["text"] == as_text["choices"][0]["text"]
    assert as_ids["usage"]["prompt_tokens"] == len(ids)
    # several prompts of ids (how lm-evaluation-harness sends a batch), each scored with its own tokens
    lm_eval = _post(server, {"prompt": [ids, ids[:5]], "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}).json()
    a, b = (c["logprobs"]["token_logprobs"] for c in lm_eval["choices"])
    assert len(a) == len(ids) + 1 and len(b) == 6 and a[:5] == pytest.approx(b[:5], abs=0.02)


@pytest.mark.parametrize(
    ("prompt", "needle"),
    [([1, 10**9], "token id 1000000000"), ([], "none of them empty"), ([[]], "none of them empty"), ([[1], "a"], "a list of texts"), ([1.5], "a list of token ids"),
     ([-1], "token id -1")],  # fmt: skip
)
def test_bad_token_prompts_are_a_400_naming_them(server, prompt, needle):
    r = _post(server, {"prompt": prompt, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert needle in r.json()["error"]["message"]


def test_streamed_echo_with_logprobs_sends_the_prompts_tokens_with_its_text(server):
    ids = _ids(server, TEXT)
    body = {"model": MODEL, "prompt": TEXT, "max_tokens": 2, "temperature": 0, "logprobs": 0, "echo": True, "stream": True, "n": 2}
    with httpx.stream("POST", f"{server.root}/v1/completions", json=body, headers=server.headers, timeout=600) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    for index in (0, 1):
        mine = [e["choices"][0] for e in events if e["choices"] and e["choices"][0]["index"] == index]
        assert mine[0]["text"] == TEXT and len(mine[0]["logprobs"]["tokens"]) == len(ids)
        assert mine[0]["logprobs"]["token_logprobs"][0] is None
        answer = [lp for c in mine[1:] for lp in c["logprobs"]["token_logprobs"]]
        assert len(answer) == 2 and mine[1]["logprobs"]["text_offset"][0] == len(TEXT)


def test_a_scored_prompt_whose_answer_ends_at_once_still_lists_one_token_after_the_prompt(server):
    """lm-evaluation-harness reads ``token_logprobs[ctxlen:-1]``: the answer's one token must be there even when it is
    the end of text, or the last prompt token's score is cut off."""
    ids = _ids(server, TEXT)
    eos = 2  # SmolLM2's <|im_end|>, its end of generation
    body = _post(server, {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True,
                          "logit_bias": {str(eos): 100}}).json()  # fmt: skip
    lp = body["choices"][0]["logprobs"]
    assert body["choices"][0]["finish_reason"] == "stop" and len(lp["token_logprobs"]) == len(ids) + 1
    assert lp["tokens"][-1] == "" and lp["token_logprobs"][-1] <= 0  # the end of text (its odds before the bias)
    plain = _post(server, {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}).json()
    assert plain["choices"][0]["logprobs"]["token_logprobs"][:-1] == pytest.approx(lp["token_logprobs"][:-1], abs=1e-6)
    floats = _post(server, {"prompt": [float(t) for t in ids], "max_tokens": 1, "temperature": 0, "echo": True}).json()
    assert floats["choices"][0]["text"].startswith(TEXT)  # 6370.0 is a whole number, as JSON Schema's integer says



def test_echo_with_no_tokens_scores_the_prompt_alone(server):
    """``max_tokens: 0`` with ``echo``: OpenAI's legacy way to score a text; the prompt comes back with its scores
    and nothing after it, streamed or not; without ``echo`` it is a 400 saying so."""
    ids = _ids(server, TEXT)
    r = server.client().with_options(timeout=600).completions.create(
        model=MODEL, prompt=TEXT, max_tokens=0, temperature=0, logprobs=1, echo=True
    )
    choice = r.choices[0]
    assert choice.text == TEXT and choice.finish_reason == "length"
    assert len(choice.logprobs.tokens) == len(ids) and "".join(choice.logprobs.tokens) == TEXT
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 0
    longer = _post(server, {"prompt": TEXT, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}).json()
    assert choice.logprobs.token_logprobs == longer["choices"][0]["logprobs"]["token_logprobs"][: len(ids)]
    body = {"model": MODEL, "prompt": TEXT, "max_tokens": 0, "logprobs": 0, "echo": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", f"{server.root}/v1/completions", json=body, headers=server.headers, timeout=600) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
    texts = "".join(c["text"] for e in events for c in e["choices"])
    assert texts == TEXT and events[-1]["usage"]["completion_tokens"] == 0
    assert [c["finish_reason"] for e in events for c in e["choices"]][-1] == "length"
    plain = _post(server, {"prompt": TEXT, "max_tokens": 0, "echo": True}).json()
    assert plain["choices"][0]["text"] == TEXT and plain["choices"][0]["logprobs"] is None
    refused = _post(server, {"prompt": TEXT, "max_tokens": 0})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_tokens"
    assert "echo" in refused.json()["error"]["message"]
