"""gpt-oss's harmony format: its analysis channel is the thinking, its final channel the answer, a message to
``functions.NAME`` a call; ``<|end|>`` closes a message without ending the answer, and the markers reach the
parser as text, on llama.cpp and on Hearth's own vocabulary (the paged engine, MLX) alike."""

from __future__ import annotations

import json

import pytest

from engine.tools import parse_tools
from engine.tools.harmony import HarmonySplitter
from engine.types import ChatMessage, GenerationRequest, ResponseFormat, SamplingParams

THOUGHT_THEN_ANSWER = ("<|channel|>analysis<|message|>User says hi. <b>Greet</b>.<|end|>"
                       "<|start|>assistant<|channel|>final<|message|>Hello <there>!")  # fmt: skip
THOUGHT_THEN_CALL = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                     'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}')  # fmt: skip
# the recipient in the role's header, as gpt-oss also writes it (the prompt ends with "<|start|>assistant")
CALL_IN_ROLE = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Oslo"}'
TOOLS = parse_tools([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])  # fmt: skip


def split(text: str, step: int, *, cut: bool = False) -> tuple[str, str, list[tuple[str, str]]]:
    h = HarmonySplitter(["get_weather"])
    reasoning, content = [], []
    for i in range(0, len(text), step):
        r, p = h.feed(text[i : i + step])
        reasoning.append(r.reasoning)
        content.append(p.content)
    r, p = h.flush(cut=cut)
    return "".join(reasoning) + r.reasoning, "".join(content) + p.content, [(c.name, c.arguments) for c in h.calls]


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_channels_split_into_thinking_answer_and_calls_however_the_text_is_cut(step):
    assert split(THOUGHT_THEN_ANSWER, step) == ("User says hi. <b>Greet</b>.", "Hello <there>!", [])
    assert split(THOUGHT_THEN_CALL, step) == ("Need the weather.", "", [("get_weather", '{"city": "Paris"}')])
    assert split(CALL_IN_ROLE, step) == ("", "", [("get_weather", '{"city":"Oslo"}')])
    # no harmony markup at all (a grammar held the answer to JSON): the answer as it is
    assert split('{"a": "<|x"}', step) == ("", '{"a": "<|x"}', [])
    # an answer cut inside its thinking keeps it as thinking
    assert split("<|channel|>analysis<|message|>Still thinking", step) == ("Still thinking", "", [])


def test_a_message_to_a_tool_not_offered_is_shown_and_a_call_cut_short_is_still_a_call():
    preamble = "<|channel|>commentary<|message|>Let me run it.<|end|><|start|>assistant<|channel|>commentary to=python<|message|>print(1)"
    assert split(preamble, 3) == ("", "Let me run it.print(1)", [])
    cut = THOUGHT_THEN_CALL[: THOUGHT_THEN_CALL.index("Paris") + 2]
    assert split(cut, 4)[2] == []  # ended otherwise: a body that is no JSON is no call
    assert split(cut, 4, cut=True)[2] == [("get_weather", '{"city": "Pa')]


HARMONY = ["<|startoftext|>", "<|return|>", "<|call|>", "<|end|>", "<|start|>", "<|channel|>", "<|message|>",
           "<|constrain|>", "<|endoftext|>"]  # fmt: skip
TEMPLATE = ("{% for m in messages %}<|start|>{{ m.role }}{% if m.role == 'assistant' %}<|channel|>final{% endif %}"
            "<|message|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}")  # fmt: skip


@pytest.fixture(scope="module")
def harmony_gguf(tmp_path_factory):
    """A tiny random model whose vocabulary has gpt-oss's control tokens (EOS: <|return|>) and whose template
    writes harmony's messages."""
    pytest.importorskip("gguf")
    from tests.engine.gguf.test_vocab import write_starcoder_gguf

    path = tmp_path_factory.mktemp("harmony") / "tiny-harmony.gguf"
    write_starcoder_gguf(path, HARMONY, eos=1, template=TEMPLATE, context=1024)
    return path


def test_the_vocabulary_ends_and_shows_harmony_tokens_as_llama_cpp_does(harmony_gguf):
    llama_cpp = pytest.importorskip("llama_cpp")
    from engine.gguf import read_metadata, vocabulary_from_gguf

    ours = vocabulary_from_gguf(harmony_gguf, read_metadata(harmony_gguf))
    model = llama_cpp.Llama(str(harmony_gguf), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(model.model)
    ids = range(len(HARMONY))
    assert {t for t in ids if llama_cpp.llama_vocab_is_eog(vocab, t)} == set(ours.eog_ids) == {1, 2, 8}
    assert [ours.piece(t) for t in ids] == [model.detokenize([t]) for t in ids]
    assert ours.piece(HARMONY.index("<|channel|>")) == b"<|channel|>" and ours.piece(0) == b""


# The random model writes what the grammar allows: harmony's markers, in characters or as their tokens alike.
ANSWER = "<|channel|>analysis<|message|>hm, hi<|end|><|start|>assistant<|channel|>final<|message|>Hello!"
CALL = ('<|channel|>analysis<|message|>need it<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather '
        '<|constrain|>json<|message|>{"city": "Paris"}')  # fmt: skip


@pytest.mark.parametrize("kind", ["llama", "paged"])
def test_a_harmony_model_thinks_answers_and_calls_through_the_chat_pipeline(kind, harmony_gguf):
    from engine.backends.base import ModelSpec
    from tests.engine.tools.backends import load_backend

    backend = load_backend(kind, ModelSpec(name="oss", path=harmony_gguf), n_ctx=512)
    results = []
    try:  # (the paged engine, slower here, is given the call only: its <|end|> is the one that could end it)
        for text, tools in ((ANSWER, ()), (CALL, TOOLS)) if kind == "llama" else ((CALL, TOOLS),):
            grammar = ResponseFormat(type="grammar", grammar="start: " + json.dumps(text), syntax="lark")
            req = GenerationRequest(model="oss", messages=(ChatMessage("user", "hi"),), tools=tools,
                                    params=SamplingParams(temperature=0, max_tokens=300), response_format=grammar)  # fmt: skip
            rendered = backend.render_request(req)
            assert rendered is not None and rendered.tool_format == "harmony"
            results.append(list(backend.stream(req)))
    finally:
        backend.close()
    *answer, call = results
    for chunks in answer:
        assert "".join(c.reasoning or "" for c in chunks) == "hm, hi"  # <|end|> closed the thinking, not the answer
        assert "".join(c.text for c in chunks) == "Hello!" and chunks[-1].finish_reason == "stop"
    assert "".join(c.reasoning or "" for c in call) == "need it" and "".join(c.text for c in call) == ""
    made = [c for chunk in call for c in chunk.tool_calls]
    assert [(c.name, c.arguments_object) for c in made] == [("get_weather", {"city": "Paris"})]
    assert call[-1].finish_reason == "tool_calls"


def test_the_thinking_behind_an_earlier_call_goes_back_to_a_harmony_template_as_thinking():
    from engine.chat_template import ChatTemplate
    from engine.tools import render_request
    from engine.tools.spec import ToolCall

    # as gpt-oss's own: the thinking of a call shown from `thinking`, text and thinking together refused
    source = ("{% for m in messages %}{% if m.thinking is defined %}{% if m.content %}{{ raise_exception('both') }}"
              "{% endif %}<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif %}<|start|>{{ m.role }}"
              "<|message|>{{ m.content }}<|end|>{% endfor %}<|start|>assistant")  # fmt: skip
    call = ToolCall(name="get_weather", arguments='{"city": "Paris"}', id="c1")
    history = (ChatMessage("user", "Weather?"), ChatMessage("assistant", "", tool_calls=(call,), reasoning="Need it."),
               ChatMessage("tool", "sunny", tool_call_id="c1"), ChatMessage("assistant", "Sunny.", reasoning="Easy."),
               ChatMessage("user", "Thanks"))  # fmt: skip
    prompt = render_request(ChatTemplate(source), GenerationRequest(model="oss", messages=history, tools=TOOLS)).prompt
    assert "<|channel|>analysis<|message|>Need it.<|end|>" in prompt and "Easy." not in prompt
