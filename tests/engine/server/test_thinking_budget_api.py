"""The thinking budget through the port: Anthropic's ``thinking.budget_tokens`` (its own SDK), vLLM's
``thinking_token_budget`` and llama-server's ``thinking_budget_tokens`` (OpenAI's SDK) close the model's thinking
after that many tokens, and the answer follows."""

from __future__ import annotations

import httpx
import pytest

from tests.engine.server.conftest import Server
from tests.engine.tools.test_thinking_budget import ASK
from tests.engine.tools.test_thinking_grammar import THINKING

THINKER = "thinker"  # the starter with a template whose generation prompt opens the thinking
UNCAPPED = {"thinking_token_budget": -1}  # the server below caps thinking at 3 tokens where a request says nothing
MESSAGES = [{"role": m.role, "content": m.content} for m in ASK]


@pytest.fixture(scope="module")
def thinker(tmp_path_factory, starter_path):
    from engine.catalog.registry import ModelRegistry

    home = tmp_path_factory.mktemp("thinker-home")
    ModelRegistry(home).register(starter_path, name=THINKER, origin_info={"template": THINKING, "template_source": "ollama"})
    s = Server("--ctx", "1024", "--parallel", "2", "--reasoning-budget", "3", env={"HEARTH_HOME": str(home)})
    yield s
    s.stop()


def _chat(server: Server, **extra) -> tuple[str, str]:
    r = server.client().chat.completions.create(model=THINKER, messages=MESSAGES, temperature=0, max_tokens=24,
                                                extra_body=extra or None)  # fmt: skip
    message = r.choices[0].message
    return getattr(message, "reasoning_content", None) or "", message.content or ""


def test_vllm_and_llama_server_budgets_cut_the_thinking_where_the_answer_then_follows(thinker):
    free, free_text = _chat(thinker, **UNCAPPED)  # -1: no cap, as llama-server reads it
    assert "answer is yes" in free and not free_text
    for name in ("thinking_token_budget", "thinking_budget_tokens"):
        reasoning, text = _chat(thinker, **{name: 2})
        assert reasoning.strip() and free.startswith(reasoning) and len(reasoning) < len(free), (name, reasoning)
        assert text.strip() and "</think>" not in text, (name, text)
    assert _chat(thinker, thinking_budget_tokens=40) == (free, free_text)  # a budget it does not reach changes nothing


def test_the_servers_reasoning_budget_holds_where_a_request_gives_none(thinker):
    capped = _chat(thinker)
    assert capped == _chat(thinker, thinking_token_budget=3) != _chat(thinker, **UNCAPPED)
    ollama = httpx.post(f"{thinker.root}/api/chat", json={"model": THINKER, "messages": MESSAGES, "stream": False,
                        "options": {"temperature": 0, "num_predict": 24}}, headers=thinker.headers, timeout=60).json()  # fmt: skip
    assert ollama["message"]["thinking"] == capped[0] and ollama["message"]["content"] == capped[1]


def test_anthropics_budget_tokens_is_enforced(thinker):
    import anthropic

    client = anthropic.Anthropic(base_url=thinker.root, api_key=thinker.api_key, max_retries=0, timeout=120)
    kw = {"model": THINKER, "max_tokens": 24, "messages": MESSAGES, "extra_body": {"temperature": 0}}
    blocks = client.messages.create(**kw, thinking={"type": "enabled", "budget_tokens": 3}).content
    thought = "".join(b.thinking for b in blocks if b.type == "thinking")
    text = "".join(b.text for b in blocks if b.type == "text")
    assert thought.strip() and "answer is yes" not in thought and text.strip(), blocks
    with client.messages.stream(**kw, thinking={"type": "enabled", "budget_tokens": 3}) as stream:
        streamed = stream.get_final_message().content
    assert [b.model_dump() for b in streamed] == [b.model_dump() for b in blocks]


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", {"thinking_token_budget": -2}, "thinking_token_budget"),
    ("/v1/chat/completions", {"thinking_token_budget": 2.5}, "thinking_token_budget"),
    ("/v1/chat/completions", {"thinking_budget_tokens": "many"}, "thinking_budget_tokens"),
    ("/v1/messages", {"max_tokens": 8, "thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking.budget_tokens"),
])  # fmt: skip
def test_a_budget_that_is_no_count_of_tokens_is_refused(thinker, path, body, param):
    r = httpx.post(thinker.root + path, json={"model": THINKER, "messages": MESSAGES, **body}, headers=thinker.headers,
                   timeout=60)  # fmt: skip
    assert r.status_code == 400, r.text
    assert param in r.text
