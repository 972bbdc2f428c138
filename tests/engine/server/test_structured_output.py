"""Structured output as vLLM's and llama-server's clients ask for it (docs/api.md, "Structured output"), through
the real openai client against a real server on llama.cpp: choices, regular expressions, GBNF and Lark grammars,
JSON schemas; malformed and hostile grammars are a 400 and the worker goes on."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

from tests.engine.server.conftest import MODEL

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Is the sky blue? Answer."}]


def _chat(server, temperature=0.0, **extra):
    done = server.client().chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=40, temperature=temperature, seed=7, extra_body=extra
    )
    return done.choices[0]


def test_vllm_choice_regex_and_json_hold_the_answer(server):
    choice = _chat(server, 1.0, structured_outputs={"choice": ["yes", "no", "it depends"]})
    assert choice.message.content in ("yes", "no", "it depends") and choice.finish_reason == "stop"
    legacy = _chat(server, 1.0, guided_choice=["blue", "grey"])
    assert legacy.message.content in ("blue", "grey")
    pattern = r"(19|20)[0-9]{2}-[01][0-9]"
    done = server.client().completions.create(model=MODEL, prompt="The date:", max_tokens=20, temperature=0.8, seed=1,
                                              extra_body={"guided_regex": pattern})  # fmt: skip
    assert re.fullmatch(pattern, done.choices[0].text), done.choices[0].text
    schema = {"type": "object", "properties": {"blue": {"type": "boolean"}}, "required": ["blue"]}
    for given in ({"structured_outputs": {"json": schema}}, {"guided_json": json.dumps(schema)}, {"json_schema": schema}):
        answer = json.loads(_chat(server, **given).message.content)
        assert isinstance(answer["blue"], bool), given


def test_gbnf_and_lark_grammars_hold_a_streamed_answer(server):
    gbnf = 'root ::= answer "."\nanswer ::= ("Yes" | "No") ", " [a-z ]{1,30}'
    lark = 'start: ANSWER "."\nANSWER: ("Yes" | "No") ", " /[a-z ]{1,30}/'
    for field, grammar in (("grammar", gbnf), ("structured_outputs", {"grammar": lark}), ("guided_grammar", gbnf)):
        stream = server.client().chat.completions.create(model=MODEL, messages=ASK, max_tokens=60, temperature=0,
                                                         stream=True, extra_body={field: grammar})  # fmt: skip
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert re.fullmatch(r"(Yes|No), [a-z ]{1,30}\.", text), (field, text)
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_an_empty_grammar_is_no_grammar_as_clients_that_send_every_field_send_it(server):
    free = _chat(server).message.content
    assert _chat(server, grammar="", guided_regex="", structured_outputs={"grammar": "", "regex": None}).message.content == free


def test_llama_servers_completion_takes_a_gbnf_grammar(server):
    done = httpx.post(f"{server.root}/completion", headers=server.headers, timeout=60, json={
        "model": MODEL, "prompt": "Is the sky blue?", "n_predict": 20, "temperature": 0,
        "grammar": 'root ::= ("yes" | "no") "."'}).json()  # fmt: skip
    assert done["content"] in ("yes.", "no."), done


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"grammar": "root ::= ("}, "grammar"),  # malformed
        ({"grammar": "root ::= " + "(" * 20_000 + '"a"' + ")" * 20_000}, "grammar"),  # crashed llama.cpp's parser
        ({"guided_grammar": "start: " + "(" * 5_000 + '"a"' + ")" * 5_000}, "guided_grammar"),  # Lark, as deep
        ({"grammar": "root ::= x"}, "grammar"),  # a rule never defined
        ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs.regex"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_choice": ["a", 3]}, "guided_choice"),
        ({"structured_outputs": {"grammar": 'root ::= "a"', "regex": "a"}}, "structured_outputs.grammar"),  # two at once
        ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex"),
        ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs"),
        ({"grammar": "x" * 70_000}, "grammar"),  # over the bound
        ({"guided_choice": ["x" * 40_000]}, "guided_choice"),
        ({"guided_json_object": "yes"}, "guided_json_object"),
        ({"guided_regex": "[0-9]", "tool_choice": "required", "tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": {}}}}]}, "guided_regex"),  # fmt: skip
    ],
)
def test_a_grammar_that_cannot_be_used_is_a_400_and_the_worker_goes_on(server, extra, param):
    body = {"model": MODEL, "messages": ASK, "max_tokens": 4, **extra}
    r = httpx.post(f"{server.base_url}/chat/completions", headers=server.headers, json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert r.json()["error"]["message"].endswith("."), r.text
    assert httpx.get(f"{server.root}/health", timeout=10).status_code == 200


def test_an_openai_client_gets_the_400_as_its_error(server):
    with pytest.raises(openai.BadRequestError, match="GBNF"):
        _chat(server, grammar="root ::= (")
    with pytest.raises(openai.BadRequestError, match="backreferences are not supported"):  # the reason, not its lead
        _chat(server, guided_regex=r"(a)\1")


def test_a_grammar_llguidance_gives_up_on_mid_answer_ends_it_as_an_error_not_as_text_that_does_not_match(server):
    """Over one of llguidance's limits after a few tokens (an Earley row of more than 2,000 items), the answer is
    stopped with the reason, where it used to end "stop" with text the grammar does not hold."""
    rules = "\n".join(f"T{i}: /[a-z]{{{i % 50 + 1}}}q{i}/" for i in range(2000))
    grammar = "start: " + " | ".join(f"T{i}" for i in range(2000)) + "\n" + rules
    with pytest.raises(openai.BadRequestError, match="could not go on"):
        _chat(server, guided_grammar=grammar)
    with pytest.raises(openai.BadRequestError, match=r"could not go on \(no text matches it from here\)"):
        _chat(server, guided_regex="[^\\s\\S]")  # a grammar no text matches: stopped at the first token


def test_a_lark_grammar_may_hold_gbnfs_rule_sign_in_a_literal(server):
    assert _chat(server, grammar='start: "a ::= b"').message.content == "a ::= b"


def test_stop_token_ids_end_the_answer_at_the_token(server):
    """vLLM's ``stop_token_ids``: the answer ends where the model writes one of them, without it."""
    client = server.client()
    free = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=12, temperature=0)
    text = free.choices[0].text
    ids = httpx.post(f"{server.root}/tokenize", headers=server.headers, json={"content": text}, timeout=30).json()["tokens"]
    assert len(ids) >= 4, text
    cut = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=12, temperature=0,
                                    extra_body={"stop_token_ids": [ids[3]]})  # fmt: skip
    assert cut.choices[0].finish_reason == "stop" and text.startswith(cut.choices[0].text)
    assert len(cut.choices[0].text) < len(text) and cut.usage.completion_tokens == 3  # the stop token is left out
    r = httpx.post(f"{server.base_url}/completions", headers=server.headers, timeout=30,
                   json={"model": MODEL, "prompt": "x", "stop_token_ids": [-1]})  # fmt: skip
    assert r.status_code == 400, r.text
