import pytest

from engine.errors import InvalidRequest
from engine.types import ChatMessage, GenerationRequest, MediaInput, SamplingParams, as_messages


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -1},
        {"temperature": float("nan")},
        {"top_p": 1.5},
        {"max_tokens": 0},
        {"max_tokens": 2.5},
        {"top_k": -3},
        {"logprobs": 21},
        {"stop": [1, 2]},
        {"logit_bias": {"x": 1}},
        {"logit_bias": {"5": 500}},
        {"seed": "abc"},
        {"min_tokens": -1},
        {"min_tokens": True},
        {"min_tokens": 5, "max_tokens": 4},
    ],
)
def test_bad_sampling_params_raise_invalid_request(kwargs):
    with pytest.raises(InvalidRequest) as info:
        SamplingParams(**kwargs)
    assert str(info.value).endswith(".")


def test_min_tokens_holds_the_end_until_the_answer_is_that_long():
    p = SamplingParams(min_tokens=3, max_tokens=3)
    assert [p.holds_end(n) for n in range(5)] == [True, True, True, False, False]
    assert not SamplingParams().holds_end(0)


def test_sampling_params_normalise_stop_and_bias():
    p = SamplingParams(stop="END", logit_bias={"7": 2})
    assert p.stop == ("END",)
    assert p.logit_bias == ((7, 2.0),)
    assert SamplingParams(temperature=0).greedy


def test_request_needs_exactly_one_of_messages_or_prompt():
    with pytest.raises(InvalidRequest):
        GenerationRequest(model="m")
    with pytest.raises(InvalidRequest):
        GenerationRequest(model="m", prompt="x", messages=(ChatMessage("user", "x"),))
    with pytest.raises(InvalidRequest):
        GenerationRequest(model="m", messages=())


def test_a_context_continues_chat_messages_only():
    user = ChatMessage("user", "x")
    assert GenerationRequest(model="m", messages=(user,), context=(1, 2)).context == (1, 2)
    for bad in ({"prompt": "x"}, {"prompt": "", "prompt_ids": (3,)}):
        with pytest.raises(InvalidRequest) as exc:
            GenerationRequest(model="m", context=(1,), **bad)
        assert exc.value.param == "context"
    picture = ChatMessage("user", "x", media=(MediaInput("image", b"png"),))
    with pytest.raises(InvalidRequest, match="images"):
        GenerationRequest(model="m", messages=(picture,), context=(1,))


def test_as_messages_flattens_text_parts_and_checks_roles():
    msgs = as_messages([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert msgs == (ChatMessage("user", "ab"),)
    with pytest.raises(InvalidRequest):
        as_messages([{"role": "wizard", "content": "hi"}])
