"""Pictures whose tokens attend to each other both ways (Gemma 3's layout, libmtmd decodes them with non-causal
attention) in the llama.cpp loop: the Gemma-3-shaped tiny model of tests/engine/server/tiny_vision.py, whose layers
attend over a sliding window of 24 tokens (Gemma's local layers: 512 or 1,024)."""

from __future__ import annotations

import httpx
import pytest

from engine.backends.base import LoadOptions, ModelSpec
from engine.backends.llamacpp.slots import UNCACHED_TAIL
from engine.types import MEDIA_MARKER, ChatMessage, GenerationRequest, MediaInput, SamplingParams
from tests.engine.server import tiny_vision
from tests.engine.server.llama_server import llama_server, needs_llama_server
from tests.engine.server.vision_fixtures import QUESTION, checkerboard, data_url, gradient

SPEC = ModelSpec(name="tiny-gemma3", path=tiny_vision.GEMMA3_MODEL_PATH, mmproj=tiny_vision.GEMMA3_MMPROJ_PATH)
PICTURE_TOKENS = 16  # 8x8 patches pooled 2x2


@pytest.fixture(scope="module")
def gemma3_backend():
    from engine.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend()
    backend.load(SPEC, LoadOptions(n_ctx=512, n_seq_max=4, n_threads=1))
    yield backend
    backend.close()


def _request(*pictures: bytes, text: str = QUESTION, max_tokens: int = 8) -> GenerationRequest:
    media = tuple(MediaInput("image", p, f"messages[0].content[{k + 1}]") for k, p in enumerate(pictures))
    message = ChatMessage("user", text + MEDIA_MARKER * len(pictures), media=media)
    return GenerationRequest(
        model=SPEC.name, messages=(message,), params=SamplingParams(temperature=0, max_tokens=max_tokens)
    )


def _tokens(stream) -> tuple[list[int], object]:
    chunks = list(stream)
    assert chunks[-1].finish_reason in ("stop", "length"), chunks[-1].error
    return [t for c in chunks for t in c.token_ids], chunks[-1]


def _encoded(backend) -> int:
    return backend.stats().details["media_encoded"]


def test_pictures_are_decoded_non_causally_and_two_give_two_answers(gemma3_backend):
    prompt = gemma3_backend.prompt_tokens(_request(checkerboard()))
    try:
        (chunk,) = prompt.media.values()
        assert chunk.non_causal and chunk.n_tokens == PICTURE_TOKENS
        start_of_image, end_of_image = gemma3_backend.tokenize("<start_of_image><end_of_image>", special=True)
        assert prompt[chunk.start - 1] == start_of_image and prompt[chunk.end] == end_of_image  # mtmd's own markers
    finally:
        prompt.close()
    a, a_final = _tokens(gemma3_backend.stream(_request(checkerboard())))
    b, _ = _tokens(gemma3_backend.stream(_request(gradient())))
    text_only, text_final = _tokens(gemma3_backend.stream(_request()))
    assert len({tuple(a), tuple(b), tuple(text_only)}) == 3
    assert a_final.prompt_tokens == text_final.prompt_tokens + PICTURE_TOKENS + 2


def test_the_same_picture_again_comes_from_the_cache(gemma3_backend):
    first, _ = _tokens(gemma3_backend.stream(_request(gradient(), text="Describe it.")))
    before = _encoded(gemma3_backend)
    again, final = _tokens(gemma3_backend.stream(_request(gradient(), text="Describe it.")))
    assert _encoded(gemma3_backend) == before  # not encoded a second time
    assert final.cached_tokens == final.prompt_tokens - UNCACHED_TAIL
    assert again == first


def test_two_pictures_in_one_batch_answer_as_alone(gemma3_backend):
    reqs = [_request(checkerboard(), text="Look."), _request(gradient(), text="Look.")]
    alone = [_tokens(gemma3_backend.stream(r))[0] for r in reqs]
    for k in range(4):  # other text takes every slot: the pictures are encoded again, beside each other
        _tokens(gemma3_backend.stream(_request(text=f"Unrelated words number {k}.", max_tokens=1)))
    before = _encoded(gemma3_backend)
    streams = [gemma3_backend.stream(r) for r in reqs]  # both submitted before either is read
    together = [_tokens(s)[0] for s in streams]
    assert _encoded(gemma3_backend) == before + 2
    assert together == alone


def _after_picture(picture: bytes, text: str, max_tokens: int) -> GenerationRequest:
    message = ChatMessage("user", MEDIA_MARKER + text, media=(MediaInput("image", picture, "messages[0].content[0]"),))
    return GenerationRequest(model=SPEC.name, messages=(message,), params=SamplingParams(temperature=0, max_tokens=max_tokens))


def test_a_beginning_another_slot_has_answered_a_window_past_is_not_copied(gemma3_backend):
    """A slot that has answered 30 tokens past a beginning keeps only its last window of 24 (llama.cpp's SWA cache),
    so a prompt that shares the beginning is not given a copy of it, which would lack the window before its end
    (and answer otherwise from its first token)."""
    b = _after_picture(checkerboard(), "Tell me about its colours, please, and then its shape.", 6)
    alone, _ = _tokens(gemma3_backend.stream(b))
    for k in range(4):  # other text takes every slot
        _tokens(gemma3_backend.stream(_request(text=f"Unrelated words number {k}.", max_tokens=1)))
    _tokens(gemma3_backend.stream(_after_picture(checkerboard(), "Tell me about its colours, please, at length.", 30)))
    again, final = _tokens(gemma3_backend.stream(b))
    assert again == alone
    assert final.cached_tokens < PICTURE_TOKENS  # the shared beginning was computed again


def test_a_batch_smaller_than_a_picture_grows_to_hold_it(gemma3_backend):
    """Prompts computed in blocks of 8, as asked, and a picture's 16 tokens still in one micro-batch (a GPU load's
    blocks of 64 against Gemma 3's 256): split in two, the first half would not see the second, and the answers
    would change by their sixth token."""
    from engine.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend()
    backend.load(SPEC, LoadOptions(n_ctx=256, n_seq_max=1, n_threads=1, n_batch=8))
    try:
        loop = backend.loop
        assert loop is not None and (loop.n_batch, loop.media_batch) == (8, PICTURE_TOKENS)
        for picture in (checkerboard(), gradient()):
            small, _ = _tokens(backend.stream(_request(picture)))
            assert small == _tokens(gemma3_backend.stream(_request(picture)))[0]
        assert _tokens(backend.stream(_request(text="A longer question, of more than eight tokens, about nothing.")))[0]
    finally:
        backend.close()


@needs_llama_server
def test_answers_equal_llama_servers(gemma3_backend):
    """llama.cpp's own server, on the same two files and chat template, gives the same greedy tokens: for each
    picture, both in one message, and a follow-up turn about a picture (Hearth's from its cached KV).

    Decoded causally, as if split into batches, the pictures' answers differ by their sixth token: 12 tell the two
    apart."""
    checks = [[checkerboard()], [gradient()], [gradient(), checkerboard()]]
    with llama_server(SPEC.path, "--mmproj", str(SPEC.mmproj), "-c", "512", "-np", "1") as url:
        for pictures in checks:
            req = _request(*pictures, max_tokens=12)
            tokens, final = _tokens(gemma3_backend.stream(req))
            ours = gemma3_backend.model.detokenize(tokens)
            parts = [{"type": "text", "text": QUESTION}]
            parts += [{"type": "image_url", "image_url": {"url": data_url(p)}} for p in pictures]
            turns = [{"role": "user", "content": parts}]
            assert _ask(url, turns) == (ours, final.prompt_tokens)
        turns += [{"role": "assistant", "content": ours}, {"role": "user", "content": "And its colours?"}]
        follow = (*req.messages, ChatMessage("assistant", ours), ChatMessage("user", "And its colours?"))
        tokens, final = _tokens(gemma3_backend.stream(GenerationRequest(model=SPEC.name, messages=follow, params=req.params)))
        assert final.cached_tokens > 2 * PICTURE_TOKENS  # the pictures came from the first turn's KV
        assert _ask(url, turns) == (gemma3_backend.model.detokenize(tokens), final.prompt_tokens)


def _ask(url: str, turns: list[dict]) -> tuple[str, int]:
    body = {"messages": turns, "temperature": 0, "max_tokens": 12}
    theirs = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
    return theirs["choices"][0]["message"]["content"], theirs["usage"]["prompt_tokens"]
