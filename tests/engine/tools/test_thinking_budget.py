"""A thinking budget (Anthropic's ``thinking.budget_tokens``, vLLM's ``thinking_token_budget``, llama-server's
``thinking_budget_tokens``) closes the model's thinking once it has taken that many tokens, and the answer goes on
from there: the same rule on llama.cpp, the paged engine and MLX."""

from __future__ import annotations

import pytest

from engine.backends.base import ModelSpec
from engine.tools.render import RenderedChat
from engine.tools.thinking_budget import ThinkingBudget, thinking_budget_for
from engine.types import ChatMessage, GenerationRequest, SamplingParams
from tests.engine.tools.backends import load_backend
from tests.engine.tools.test_thinking_grammar import THINKING

# The starter copies what it is shown: it thinks "I think the answer is yes.", closes the thinking, then answers.
ASK = (ChatMessage("user", "Repeat after me exactly: hmm</think>Hi there."), ChatMessage("assistant", "hmm</think>Hi there."),
       ChatMessage("user", "Repeat after me exactly: I think the answer is yes.</think>Yes, it is."))  # fmt: skip


@pytest.fixture(scope="module")
def vocabulary(starter_path):
    from engine.gguf.reader import read_metadata
    from engine.gguf.vocab import vocabulary_from_gguf

    return vocabulary_from_gguf(starter_path, read_metadata(starter_path))


def _budget(vocabulary, budget: int, rendered: RenderedChat) -> ThinkingBudget:
    made = thinking_budget_for(rendered, budget, lambda text: vocabulary.encode(text, parse_special=True), vocabulary.piece)
    assert made is not None
    return made


def _run(budget: ThinkingBudget, vocabulary, text: str) -> tuple[list[int], list[int]]:
    """Feed ``text``'s tokens as the model's draws, each replaced by a forced token where there is one: the
    tokens taken, and the positions that were forced."""
    taken, forced_at = [], []
    queue = vocabulary.encode(text, parse_special=False)
    while queue or budget.forced() is not None:
        forced = budget.forced()
        token = forced if forced is not None else queue.pop(0)
        if forced is not None:
            forced_at.append(len(taken))
        budget.feed(token)
        taken.append(token)
    return taken, forced_at


def test_the_thinking_is_closed_after_its_budget_and_then_left_alone(vocabulary):
    rendered = RenderedChat(prompt="", think_tags=("<think>", "</think>"), thinking_started=True)
    budget = _budget(vocabulary, 3, rendered)
    closing = vocabulary.encode("</think>", parse_special=True)
    thought = vocabulary.encode(" one two three four five", parse_special=False)
    taken, forced_at = _run(budget, vocabulary, " one two three four five")
    assert taken[:3] == thought[:3] and taken[3 : 3 + len(closing)] == closing  # three thought, then the tag
    assert forced_at == list(range(3, 3 + len(closing))) and not budget.pending
    assert budget.forced() is None  # the answer from there is free


def test_thinking_the_model_opens_itself_is_counted_from_its_tag_and_a_closed_one_is_not_cut(vocabulary):
    rendered = RenderedChat(prompt="", think_tags=("<think>", "</think>"))
    budget = _budget(vocabulary, 2, rendered)
    _, forced_at = _run(budget, vocabulary, " <thi")
    assert forced_at == [] and budget.pending  # the opening tag in the making, after a space
    _, forced_at = _run(budget, vocabulary, "nk>a b c")  # the tag split across tokens opens it
    assert forced_at and budget.spent == 2
    early = _budget(vocabulary, 50, rendered)
    _, forced_at = _run(early, vocabulary, "<think>short</think> answer " + "word " * 60)
    assert forced_at == [] and not early.pending  # it closed its thinking itself: nothing is forced, nothing after


def test_an_answer_that_starts_with_text_has_no_thinking_and_a_tag_in_it_is_text(vocabulary):
    # as the stream's parser reads it: thinking opens only as the answer's first text
    budget = _budget(vocabulary, 0, RenderedChat(prompt="", think_tags=("<think>", "</think>")))
    taken, forced_at = _run(budget, vocabulary, "Use re.sub(r'<think>.*?</think>', '', text)")
    assert forced_at == [] and not budget.pending
    assert vocabulary.decode(taken) == "Use re.sub(r'<think>.*?</think>', '', text)"


def test_a_budget_spent_inside_the_models_own_closing_tag_finishes_that_tag(vocabulary):
    budget = _budget(vocabulary, 2, RenderedChat(prompt="", think_tags=("<think>", "</think>")))
    thought = vocabulary.encode("<think>a</think>b", parse_special=False)
    assert vocabulary.decode(thought[:5]).endswith("a</")  # the budget runs out as the model begins its tag
    taken, forced_at = _run(budget, vocabulary, "<think>a</think>b")
    assert vocabulary.decode(taken).startswith("<think>a</think>") and forced_at, vocabulary.decode(taken)


def test_an_opening_tag_that_begins_with_a_control_token_is_read_on_every_backend(vocabulary):
    # Gemma 4's <|channel>thought: its first token is a control token whose piece is empty on the paged engine and
    # MLX; the starter's <|im_start|> stands in for it
    rendered = RenderedChat(prompt="", think_tags=("<|im_start|>thought", "<|im_end|>"))
    budget = _budget(vocabulary, 1, rendered)
    (control,) = vocabulary.encode("<|im_start|>", parse_special=True)
    assert vocabulary.piece(control) == b""
    budget.feed(control)
    for token in vocabulary.encode("thought\nhmm, well", parse_special=False)[:2]:
        budget.feed(token)
    assert budget.forced() == vocabulary.encode("<|im_end|>", parse_special=True)[0]


def test_a_budget_of_zero_closes_the_thinking_as_it_opens(vocabulary):
    budget = _budget(vocabulary, 0, RenderedChat(prompt="", think_tags=("<think>", "</think>"), thinking_started=True))
    closing = vocabulary.encode("</think>", parse_special=True)
    taken, forced_at = _run(budget, vocabulary, "")
    assert taken == closing and forced_at == list(range(len(closing)))


def test_a_closing_tag_that_is_one_control_token_is_forced_as_that_token_and_read_though_its_piece_is_empty(vocabulary):
    # as Qwen3's </think> and Gemma 4's <channel|> are: two of the starter's control tokens stand in for such tags
    rendered = RenderedChat(prompt="", think_tags=("<jupyter_code>", "<jupyter_output>"))
    budget = _budget(vocabulary, 2, rendered)
    (opening,) = vocabulary.encode("<jupyter_code>", parse_special=True)
    (closing,) = vocabulary.encode("<jupyter_output>", parse_special=True)
    assert vocabulary.piece(opening) == vocabulary.piece(closing) == b""
    budget.feed(opening)  # the model opens it itself
    words = vocabulary.encode(" a b c", parse_special=False)
    for token in words[:2]:
        assert budget.forced() is None
        budget.feed(token)
    assert budget.forced() == closing
    budget.feed(closing)
    assert not budget.pending and budget.forced() is None
    early = _budget(vocabulary, 5, rendered)
    for token in (opening, words[0], closing):  # the model's own closing token ends the count
        early.feed(token)
    assert not early.pending


def test_gpt_oss_thinking_ends_by_switching_to_the_final_channel(vocabulary):
    rendered = RenderedChat(prompt="", tool_format="harmony")
    budget = _budget(vocabulary, 1, rendered)
    switch = vocabulary.encode("<|end|><|start|>assistant<|channel|>final<|message|>", parse_special=True)
    taken, forced_at = _run(budget, vocabulary, "<|channel|>analysis<|message|>Let me see more")
    opened = len(vocabulary.encode("<|channel|>analysis<|message|>Let", parse_special=False))
    assert taken[opened : opened + len(switch)] == switch and forced_at[0] == opened


def test_no_budget_where_none_is_asked_or_the_prompt_is_raw(vocabulary):
    encode = lambda text: vocabulary.encode(text, parse_special=True)  # noqa: E731
    assert thinking_budget_for(RenderedChat(prompt=""), None, encode, vocabulary.piece) is None
    assert thinking_budget_for(None, 5, encode, vocabulary.piece) is None


@pytest.mark.parametrize("kind", ["llama", "paged-process", "mlx"])  # the paged engine as `hearth serve` runs it
def test_a_backend_closes_the_thinking_at_its_budget_and_answers(kind, starter_path, vocabulary):
    backend = load_backend(kind, ModelSpec(name="thinker", path=starter_path, chat_template=THINKING), n_ctx=1024, n_seq=2)

    def ask(budget: int | None) -> tuple[str, str, str]:
        params = SamplingParams(temperature=0, max_tokens=16, thinking_budget=budget)
        chunks = list(backend.stream(GenerationRequest(model="thinker", messages=ASK, params=params)))
        reasoning, text = "".join(c.reasoning or "" for c in chunks), "".join(c.text or "" for c in chunks)
        return reasoning, text, chunks[-1].finish_reason or ""

    try:
        free, free_text, _ = ask(None)
        cut, text, _ = ask(3)
        closed, at_once, _ = ask(0)
    finally:
        backend.close()
    assert "answer is yes" in free and not free_text  # unbudgeted: it thinks the whole line, then ends
    thought = vocabulary.encode(free, parse_special=False)
    assert cut == vocabulary.decode(thought[:3]) and cut.strip(), (cut, free)  # three tokens of the same thought
    assert text.strip() and "</think>" not in text  # closed for it, and it answers from there
    assert closed == "" and at_once.strip() and "</think>" not in at_once
