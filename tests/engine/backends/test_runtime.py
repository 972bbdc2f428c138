"""The one request stream every backend uses: text from byte pieces, stop strings, the finish decision."""

from __future__ import annotations

from engine.backends.runtime import RequestStream
from engine.types import GenerationRequest, SamplingParams, TokenLogprob

# token id -> bytes: "é" is split over two tokens, 9 is a control token, 0 ends the generation
PIECES = {1: b"Hel", 2: b"lo", 3: b" w\xc3", 4: b"\xa9rld", 5: b" STOP", 6: b"!", 9: b"", 0: b""}


def stream(**params) -> RequestStream:
    req = GenerationRequest(model="m", prompt="p", params=SamplingParams(**params))
    return RequestStream(req, piece=PIECES.__getitem__, is_eog={0}.__contains__, prompt_tokens=4)


def collect(s: RequestStream) -> list:
    out = []
    while not s.out.empty():
        out.append(s.out.get())
    return out


def test_multibyte_characters_split_over_tokens_stream_whole():
    s = stream()
    for t in (1, 2, 3, 4):
        assert s.push(t) is False
    assert s.push(0) is True
    chunks = collect(s)
    assert "".join(c.text for c in chunks) == "Hello wérld"
    assert chunks[2].text == " w"  # the half of "é" waits for the next token
    final = chunks[-1]
    assert final.finish_reason == "stop" and final.completion_tokens == 4 and final.prompt_tokens == 4
    assert [c.finish_reason for c in chunks[:-1]] == [None] * 4
    assert final.time_to_first_token is not None and final.tokens_per_second is not None


def test_a_stop_string_ends_the_stream_and_is_never_sent():
    s = stream(stop=["STOP"])
    assert not s.push(1) and not s.push(2)
    assert s.push(5) is True
    chunks = collect(s)
    assert "".join(c.text for c in chunks) == "Hello "
    assert chunks[-1].finish_reason == "stop" and chunks[-1].stop_sequence == "STOP"


def test_held_back_text_is_flushed_when_the_stream_ends_without_a_match():
    s = stream(stop=["!!"])
    s.push(1)
    s.push(6)  # "!" may start "!!": held back
    s.finish("length")
    assert "".join(c.text for c in collect(s)) == "Hel!"


def _lp(token: int) -> tuple[TokenLogprob, ...]:
    return (TokenLogprob(PIECES[token].decode(errors="replace"), token, -1.0, tuple(PIECES[token])),)


def test_log_probabilities_go_out_with_their_tokens_text_and_a_stop_strings_never():
    """As OpenAI's and llama-server's: an answer's log-probabilities are those of the tokens of its text. A token
    whose text the stop string holds back waits with it, and is dropped when the string matches."""
    s = stream(stop=["!STOP", "wé"], logprobs=0)
    for t in (1, 6):  # "!" may start "!STOP": held back, its log-probability too
        s.push(t, logprobs=_lp(t))
    s.push(2, logprobs=_lp(2))  # "!lo" matches neither: the held "!" goes out, with its token's log-probability
    sent = [(c.text, [lp.token_id for lp in c.logprobs]) for c in collect(s)]
    assert sent == [("Hel", [1]), ("", []), ("!lo", [6, 2])]
    s.push(3, logprobs=_lp(3))  # " w" and half of "é": " " goes out, "w" may start "wé"
    assert s.push(4, logprobs=_lp(4)) is True  # "wé" matched: token 3 began with " ", token 4's text is all cut
    chunks = collect(s)
    assert "".join(c.text for c in chunks) == " " and [lp.token_id for c in chunks for lp in c.logprobs] == [3]
    assert chunks[-1].stop_sequence == "wé" and chunks[-1].completion_tokens == 5

    s = stream(logprobs=0)  # no stop string: "é"'s first half comes with " w", a control token's with the end
    for t in (3, 4, 9):
        s.push(t, logprobs=_lp(t))
    s.finish("length")
    sent = [(c.text, [lp.token_id for lp in c.logprobs]) for c in collect(s)]
    assert sent == [(" w", [3]), ("érld", [4]), ("", []), ("", [9])]


def test_max_tokens_and_a_full_context_end_with_length():
    s = stream(max_tokens=2)
    assert not s.push(1) and s.push(2)
    assert collect(s)[-1].finish_reason == "length"
    s = stream()
    assert s.push(1, context_full=True)
    assert collect(s)[-1].finish_reason == "length"


def test_ignore_eos_and_stop_token_ids():
    s = stream(ignore_eos=True, stop_token_ids=(6,))
    assert s.push(0) is False  # EOS ignored: counted as a token
    assert s.push(6) is True
    final = collect(s)[-1]
    assert final.finish_reason == "stop" and final.completion_tokens == 1


def test_finish_is_sent_once_and_a_cancel_drops_held_back_text():
    s = stream(stop=["!!"])
    s.push(6)
    s.finish("cancelled")
    s.finish("error", error="late")
    chunks = collect(s)
    assert [c.finish_reason for c in chunks] == [None, "cancelled"] and chunks[-1].text == ""


def test_closing_the_iterator_early_cancels():
    s = stream()
    s.push(1)
    s.push(2)
    cancelled = []
    it = s.chunks(lambda: cancelled.append(True))
    assert next(it).text == "Hel"
    it.close()
    assert cancelled == [True]


def test_a_held_stream_hands_its_chunks_over_in_order_only_once_released():
    s = stream(max_tokens=2)
    s.push(1)
    s.hold()
    assert s.push(2) is True  # its last token: the final chunk is held back too
    assert [c.text for c in collect(s)] == ["Hel"]
    s.release()
    chunks = collect(s)
    assert [c.text for c in chunks] == ["lo", ""] and chunks[-1].finish_reason == "length"
    s.release()  # nothing held: nothing more comes
    assert collect(s) == []


def test_drafted_tokens_count_as_accepted_only_once_they_are_part_of_the_answer():
    """A verified draft's tokens after the one that ends the answer (a stop string, here inside the draft) are
    not in the answer, so usage does not count them as accepted; the drafted tokens judged all count."""
    s = stream(stop=["STOP"])
    s.verifying(3)  # a draft of three: "lo", " STOP", "!"
    assert not s.push(1)  # the token sampled last step
    assert not s.push(2, kept_draft=True)
    assert s.push(5, kept_draft=True)  # the stop string: the answer ends; "!" is never pushed
    final = collect(s)[-1]
    assert (final.finish_reason, final.completion_tokens) == ("stop", 3)
    assert (final.draft_tokens, final.accepted_draft_tokens) == (3, 2)
    s = stream()
    s.verifying(2)
    assert not s.push(1, kept_draft=True) and s.push(0, kept_draft=True)  # the end of the answer is not a token of it
    final = collect(s)[-1]
    assert (final.completion_tokens, final.draft_tokens, final.accepted_draft_tokens) == (1, 2, 1)


class _Vocab:
    """A backend's prompt_tokens over a toy vocabulary: a raw prompt is its characters' codes, after BOS (1) where
    the backend adds one; token ids are checked against 100 ids."""

    def __init__(self, bos: bool) -> None:
        self.bos = bos
        self.info = type("Info", (), {"n_ctx": 16})()

    def prompt_tokens(self, request: GenerationRequest, rendered=None) -> list[int]:
        if request.prompt_ids is not None:
            if any(not 0 <= t < 100 for t in request.prompt_ids):
                from engine.errors import InvalidRequest

                raise InvalidRequest("no such token", param="prompt")
            return list(request.prompt_ids)
        text = request.prompt if request.prompt is not None else "".join(m.content for m in request.messages or ())
        return ([1] if self.bos else []) + [ord(c) - 40 for c in text]


def test_a_context_goes_before_the_prompt_and_a_bos_the_backend_adds_is_not_repeated():
    import pytest

    from engine.backends.runtime import prompt_ids
    from engine.errors import ContextLengthExceeded, InvalidRequest
    from engine.types import ChatMessage

    ask = lambda context: GenerationRequest(model="m", messages=(ChatMessage("user", "PQ"),), context=context)  # noqa: E731
    assert prompt_ids(_Vocab(bos=True), ask((1, 5, 6))) == [1, 5, 6, 40, 41]  # the earlier exchange opened with it
    assert prompt_ids(_Vocab(bos=True), ask((5, 6))) == [5, 6, 1, 40, 41]  # one that did not: kept as it is
    assert prompt_ids(_Vocab(bos=False), ask((1, 5))) == [1, 5, 40, 41]  # 1 is no BOS this backend adds
    with pytest.raises(InvalidRequest) as bad:
        prompt_ids(_Vocab(bos=False), ask((500,)))
    assert bad.value.param == "context"
    with pytest.raises(ContextLengthExceeded):  # refused before its ids are read
        prompt_ids(_Vocab(bos=False), ask((7,) * 16))


def test_the_context_of_an_answer_cut_by_a_stop_string_ends_with_the_text_sent():
    req = GenerationRequest(model="m", prompt="p", params=SamplingParams(stop=("STOP",)), return_context=True)
    s = RequestStream(req, piece=PIECES.__getitem__, is_eog={0}.__contains__, prompt_tokens=2)
    s.context_prompt = (7, 8)
    for t in (1, 2, 5, 6):
        if s.push(t):
            break
    final = collect(s)[-1]
    assert final.finish_reason == "stop" and final.context == (7, 8, 1, 2)  # " STOP" is not in "Hello" + " "
