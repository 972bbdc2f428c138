"""An answer that starts inside its thinking (the template opened it) is held by its grammar (a forced call, a
response format) only from the thinking's end, on llama.cpp and the paged engine: before, the grammar held the
thinking itself, and the call was read as thought (no call, finish "stop")."""

from __future__ import annotations

import pytest

from engine.backends.base import ModelSpec
from engine.tools import parse_tool_choice, parse_tools
from engine.tools.call_watch import ThinkEndWatch
from engine.types import ChatMessage, GenerationRequest, ResponseFormat, SamplingParams
from tests.engine.tools.backends import load_backend

# ChatML whose generation prompt opens the thinking, as DeepSeek-R1's distills and QwQ do
THINKING = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")  # fmt: skip
TOOLS = parse_tools([{"type": "function", "function": {"name": "yes", "parameters": {
    "type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}}}])  # fmt: skip
# The starter model copies what it is shown: it thinks a few words, closes the thinking, then calls.
ASK = (ChatMessage("user", "Repeat after me exactly: hello</think>"), ChatMessage("assistant", "hello"),
       ChatMessage("user", "Repeat after me exactly: I think the answer is yes.</think>"))  # fmt: skip


def test_the_watch_fires_once_where_the_closing_tag_is_written_even_split_across_tokens():
    watch = ThinkEndWatch("</think>")
    assert [watch.feed(p) for p in (b"hmm, <think> no", b" </th", b"in")] == [None] * 3
    assert watch.feed(b"k>\n") == b"" and watch.opened_tokens == [] and watch.lead == b""
    assert watch.feed(b"</think>") is None  # spent


def test_a_matcher_waits_for_the_thinkings_end_then_holds_the_answer(starter_path):
    from engine.gguf.reader import read_metadata
    from engine.gguf.vocab import vocabulary_from_gguf
    from engine.tools.guidance import GrammarMatcher, user_grammar, vocab_for

    vocabulary = vocabulary_from_gguf(starter_path, read_metadata(starter_path))
    vocab = vocab_for(vocabulary)
    matcher = GrammarMatcher(vocab, user_grammar(ResponseFormat.choice(["yes", "no"], param="c")))
    matcher.wait_for(ThinkEndWatch("</think>"))
    for token in vocabulary.encode("I could say maybe.", parse_special=False):
        assert not matcher.active
        matcher.consume(token)  # free: shown to the watch only
    for token in vocabulary.encode("</think>", parse_special=False):
        matcher.consume(token)
    assert matcher.active
    allowed = {vocab.text_of(int(t)) for t in matcher.allowed().nonzero()[0]}
    assert allowed and all(b"yes".startswith(a) or b"no".startswith(a) for a in allowed), allowed


def _load(kind: str, path):
    return load_backend(kind, ModelSpec(name="thinker", path=path, chat_template=THINKING), n_ctx=1024, n_seq=2)


@pytest.mark.parametrize("kind", ["llama", "paged"])
def test_a_forced_call_comes_after_the_thinking_the_template_opened(kind, starter_path):
    backend = _load(kind, starter_path)
    try:
        req = GenerationRequest(model="thinker", messages=ASK, params=SamplingParams(temperature=0, max_tokens=60),
                                tools=TOOLS, tool_choice=parse_tool_choice("required", TOOLS))  # fmt: skip
        assert backend.render_request(req).thinking_started
        chunks = list(backend.stream(req))
    finally:
        backend.close()
    reasoning = "".join(c.reasoning or "" for c in chunks)
    calls = [call for c in chunks for call in c.tool_calls]
    assert "answer is yes" in reasoning and "tool_call" not in reasoning, reasoning  # thought freely, then called
    assert [c.name for c in calls] == ["yes"] and chunks[-1].finish_reason == "tool_calls"
