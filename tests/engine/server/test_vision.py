"""Pictures through every dialect, with each one's own SDK, on a real `hearth serve` with the tiny vision model
(tests/engine/server/tiny_vision.py) paired by ``--mmproj``; and llama.cpp's own server as the reference where one
is built."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest

from engine.backends.llamacpp.slots import UNCACHED_TAIL
from engine.errors import InvalidRequest
from engine.server import media
from tests.engine.server import tiny_vision
from tests.engine.server.conftest import MODEL, Server
from tests.engine.server.llama_server import LLAMA_SERVER, llama_server, needs_llama_server
from tests.engine.server.vision_fixtures import (
    QUESTION,
    VISION,
    b64,
    bomb_png,
    checkerboard,
    data_url,
    gradient,
    wav,
)

MAX_TOKENS = 10


@pytest.fixture(scope="module")
def vision_server():
    """`hearth serve --model tiny-vision.gguf --mmproj mmproj.gguf --allow-image-urls` (the starter model, text
    only, is served beside it from the session's data folder)."""
    s = Server(
        "--model", str(tiny_vision.MODEL_PATH), "--mmproj", str(tiny_vision.MMPROJ_PATH), "--allow-image-urls",
        "--parallel", "4", "--ctx", "1024", "--threads", "1",
    )  # fmt: skip
    yield s
    s.stop()


def _openai(server, picture: bytes, text: str = QUESTION, *, model: str = VISION):
    parts = [{"type": "image_url", "image_url": {"url": data_url(picture)}}, {"type": "text", "text": text}]
    return server.client().chat.completions.create(
        model=model, temperature=0, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": parts}]
    )


def _stats(server) -> dict:
    resp = httpx.get(f"{server.root}/api/stats", headers=server.headers, timeout=30)
    return next(m for m in resp.json()["models"].values() if "media_encoded" in m) if resp.json()["models"] else {}


@pytest.fixture(scope="module")
def reference(vision_server) -> dict[str, str]:
    """Chat completions' answer to the question after each picture (the other dialects must give it too)."""
    return {name: _openai(vision_server, pic).choices[0].message.content for name, pic in PICTURES.items()}


PICTURES = {"checkerboard": checkerboard(), "gradient": gradient()}


def test_chat_completions_answers_each_picture_and_counts_its_tokens(vision_server, reference):
    assert reference["checkerboard"] != reference["gradient"]
    client = vision_server.client()
    text_only = client.chat.completions.create(
        model=VISION, temperature=0, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": QUESTION}]
    )
    seen = _openai(vision_server, checkerboard())
    assert seen.usage.prompt_tokens >= text_only.usage.prompt_tokens + 32  # two 16-token chunks, and their marks


def test_the_same_picture_twice_is_read_from_the_cache(vision_server):
    picture = checkerboard()
    first = _openai(vision_server, picture, "And the colours?")
    before = _stats(vision_server).get("media_encoded")
    again = _openai(vision_server, picture, "And the colours?")
    assert _stats(vision_server).get("media_encoded") == before
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - UNCACHED_TAIL
    assert again.choices[0].message.content == first.choices[0].message.content


def test_responses_answers_each_picture(vision_server, reference):
    client = vision_server.client()
    for name, pic in PICTURES.items():
        out = client.responses.create(
            model=VISION, temperature=0, max_output_tokens=MAX_TOKENS,
            input=[{"role": "user", "content": [{"type": "input_image", "image_url": data_url(pic)},
                                                {"type": "input_text", "text": QUESTION}]}],
        )  # fmt: skip
        assert out.output_text == reference[name]


def test_anthropic_messages_answers_each_picture(vision_server, reference):
    import anthropic

    client = anthropic.Anthropic(base_url=vision_server.root, api_key=vision_server.api_key, max_retries=0, timeout=120)
    for name, pic in PICTURES.items():
        want = reference[name]  # the same prompt as chat completions' picture then question: the same answer
        msg = client.messages.create(
            model=VISION, max_tokens=MAX_TOKENS, extra_body={"temperature": 0},
            messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(pic)}},
                {"type": "text", "text": QUESTION},
            ]}],
        )  # fmt: skip
        assert msg.content[0].text == want
        assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 32


def test_anthropic_tool_result_holding_a_picture_is_read_as_chat_completions_reads_a_tool_picture(vision_server):
    """A tool that reads a picture (Claude Code's Read of a PNG) answers with text and ``image`` blocks in its
    ``tool_result``: the same prompt as chat completions' tool message with an image part (it was a 400)."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.png"}}
    tool = {"name": "read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(checkerboard())}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.png:"}, image]}
    body = {"model": VISION, "max_tokens": 1, "temperature": 0, "tools": [tool], "messages": [
        {"role": "user", "content": QUESTION}, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]}  # fmt: skip
    r = httpx.post(f"{vision_server.root}/v1/messages", json=body, headers=vision_server.headers, timeout=120)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    chat = {"model": VISION, "max_tokens": 1, "temperature": 0, "tools": [{"type": "function", "function": {
        "name": "read", "description": "Read a file.", "parameters": tool["input_schema"]}}], "messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "toolu_1", "type": "function", "function": {
            "name": "read", "arguments": '{"path": "a.png"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": [
            {"type": "text", "text": "a.png:"}, {"type": "image_url", "image_url": {"url": data_url(checkerboard())}}]}]}  # fmt: skip
    same = httpx.post(f"{vision_server.root}/v1/chat/completions", json=chat, headers=vision_server.headers, timeout=120)
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == same.json()["usage"]["prompt_tokens"] > 32


def test_ollama_chat_and_generate_answer_each_picture(vision_server, reference):
    import ollama

    client = ollama.Client(host=vision_server.root, headers=vision_server.headers, timeout=120)
    options = {"temperature": 0, "num_predict": MAX_TOKENS}
    for name, pic in PICTURES.items():
        chat = client.chat(model=VISION, messages=[{"role": "user", "content": QUESTION, "images": [pic]}], options=options)
        assert chat.message.content == reference[name]
        gen = client.generate(model=VISION, prompt=QUESTION, images=[pic], options=options)
        assert gen.response == reference[name]
    shown = client.show(VISION)
    assert "vision" in shown.capabilities and "audio" not in shown.capabilities


def test_models_list_says_which_models_see(vision_server):
    listed = httpx.get(f"{vision_server.base_url}/models", headers=vision_server.headers, timeout=30).json()["data"]
    caps = {m["id"]: m.get("capabilities") for m in listed}
    assert caps[VISION] == ["vision"]
    assert caps[MODEL] == []


def _refusal(server, body: dict, path: str = "/chat/completions") -> tuple[int, str]:
    resp = httpx.post(f"{server.base_url}{path}", json=body, headers=server.headers, timeout=60)
    return resp.status_code, resp.json()["error"]["message"]


def _chat_body(url: str, model: str = VISION) -> dict:
    parts = [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": parts}]}


def _jpeg() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(gradient())).convert("RGB").save(out, format="JPEG", quality=90)
    return out.getvalue()


def _garbled_png() -> bytes:
    """The gradient PNG with its pixel data replaced by bytes that are not a zlib stream, checksums right: whole
    by its structure, so only the decoder (llama.cpp's) finds it broken."""
    import struct
    import zlib

    good = gradient()
    at = good.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", good, at)
    junk = bytes(range(7, 7 + 40))
    chunk = struct.pack(">I", len(junk)) + b"IDAT" + junk + struct.pack(">I", zlib.crc32(b"IDAT" + junk))
    return good[:at] + chunk + good[at + 12 + length :]


def test_bad_pictures_are_refused_naming_the_part_and_the_worker_keeps_answering(vision_server):
    for bad, said in [
        (b"not an image at all", "messages[0].content[1] is not a readable image"),
        (checkerboard()[:70], "messages[0].content[1] is not a readable image"),  # truncated
        (bomb_png(8000, 8000), "messages[0].content[1] has 8000x8000 pixels"),  # refused from its header
        (bomb_png(), "messages[0].content[1] has too many pixels"),
        (_jpeg()[:-300], "messages[0].content[1] is not a readable image"),  # truncated: no end marker
        (_garbled_png(), "messages[0].content[1] is not an image llama.cpp can read"),  # whole, unreadable inside
    ]:
        status, message = _refusal(vision_server, _chat_body(data_url(bad)))
        assert (status, said) == (400, message[: len(said)])
    status, message = _refusal(vision_server, _chat_body("data:image/png,rawbytes"))
    assert status == 400 and "base64 data URL" in message
    assert _openai(vision_server, gradient()).choices[0].finish_reason == "length"


def test_a_text_model_refuses_pictures_and_a_model_without_audio_refuses_sound(vision_server):
    status, message = _refusal(vision_server, _chat_body(data_url(gradient()), model=MODEL))
    assert status == 400 and "cannot read images" in message
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(28)
    parts = [{"type": "input_audio", "input_audio": {"data": b64(wav), "format": "wav"}}, {"type": "text", "text": "Hi"}]
    status, message = _refusal(vision_server, {"model": VISION, "messages": [{"role": "user", "content": parts}]})
    assert status == 400 and f"Model '{VISION}' cannot hear audio" in message


def test_a_picture_for_a_model_that_cannot_see_is_refused_in_every_dialect_before_it_is_decoded(vision_server):
    """A picture is decoded only for a model that sees: a GIF whose header is whole and whose pixels are cut off
    (found only by decoding it) gets the text model's refusal, and the vision model's 'not a readable image'."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.radial_gradient("L").save(out, format="GIF")
    cut = b64(out.getvalue()[: len(out.getvalue()) // 2])
    root = vision_server.root
    asks = {
        "/v1/messages": lambda model: {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": cut}},
            {"type": "text", "text": "Hi"}]}]},
        "/api/chat": lambda model: {"model": model, "stream": False, "messages": [{"role": "user", "content": "Hi", "images": [cut]}]},
        "/v1/responses": lambda model: {"model": model, "max_output_tokens": 2, "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": f"data:image/gif;base64,{cut}"}, {"type": "input_text", "text": "Hi"}]}]},
        "/v1/chat/completions": lambda model: _chat_body(f"data:image/gif;base64,{cut}", model=model),
    }  # fmt: skip
    for path, body in asks.items():
        for model, said in ((MODEL, "cannot read images"), (VISION, "is not a readable image")):
            r = httpx.post(f"{root}{path}", json=body(model), headers=vision_server.headers, timeout=120)
            error = r.json()["error"]
            assert r.status_code == 400 and said in (error if isinstance(error, str) else error["message"]), (path, model, r.text)


@contextmanager
def _picture_host(body: bytes) -> Iterator[str]:
    """A local HTTP server that serves ``body`` at /p.png; yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/p.png"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_picture_by_url_is_fetched_only_when_allowed(vision_server, reference):
    with _picture_host(gradient()) as url:
        parts = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]
        out = vision_server.client().chat.completions.create(
            model=VISION, temperature=0, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": parts}]
        )
        assert out.choices[0].message.content == reference["gradient"]
        with pytest.raises(InvalidRequest, match="--allow-image-urls"):
            media.image_from_url(url, "messages[0].content[0]", allow_remote=False)


def test_a_picture_too_large_to_fetch_is_refused(monkeypatch):
    monkeypatch.setattr(media, "MAX_MEDIA_BYTES", 1000)
    with _picture_host(checkerboard() + bytes(2000)) as url:
        with pytest.raises(InvalidRequest, match="larger than"):
            media.image_from_url(url, "messages[0].content[0]", allow_remote=True)


@needs_llama_server
def test_answers_equal_llama_servers(vision_server):
    """llama.cpp's own server, on the same two files, gives the same greedy tokens for each picture."""
    with llama_server(tiny_vision.MODEL_PATH, "--mmproj", str(tiny_vision.MMPROJ_PATH), "-c", "2048", "-np", "1") as url:
        for pic in PICTURES.values():
            parts = [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": data_url(pic)}}]
            body = {"messages": [{"role": "user", "content": parts}], "temperature": 0, "max_tokens": 16}
            theirs = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
            ours = httpx.post(
                f"{vision_server.base_url}/chat/completions", json={**body, "model": VISION},
                headers=vision_server.headers, timeout=120,
            ).json()  # fmt: skip
            assert ours["choices"][0]["message"]["content"] == theirs["choices"][0]["message"]["content"]
            assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]


def test_input_audio_is_heard_by_a_model_with_an_audio_encoder():
    server = Server(
        "--model", str(tiny_vision.MODEL_PATH), "--mmproj", str(tiny_vision.AUDIO_MMPROJ_PATH),
        "--parallel", "1", "--ctx", "1024", "--threads", "1",
    )  # fmt: skip
    try:
        client = server.client()
        answers = []
        for sound in (wav("tone"), wav("noise")):
            parts = [{"type": "text", "text": "Listen."}, {"type": "input_audio", "input_audio": {"data": b64(sound), "format": "wav"}}]
            out = client.chat.completions.create(
                model=VISION, temperature=0, max_tokens=6, messages=[{"role": "user", "content": parts}]
            )
            answers.append(out.choices[0].message.content)
            assert out.usage.prompt_tokens > 750
        assert answers[0] != answers[1]
        for fmt, says in ((5, 'input_audio.format must be "wav", "mp3" or "flac"'), ("ogg", "audio format 'ogg' is not supported")):
            parts = [{"type": "input_audio", "input_audio": {"data": b64(wav("tone")), "format": fmt}}]
            with pytest.raises(openai.BadRequestError, match=says):
                client.chat.completions.create(model=VISION, max_tokens=2, messages=[{"role": "user", "content": parts}])
        caps = {m.id: m.model_extra.get("capabilities") for m in client.models.list().data}
        assert caps[VISION] == ["audio"]
        if LLAMA_SERVER:  # llama.cpp's own server hears the same
            with llama_server(tiny_vision.MODEL_PATH, "--mmproj", str(tiny_vision.AUDIO_MMPROJ_PATH), "-np", "1") as url:
                for sound, ours in zip((wav("tone"), wav("noise")), answers, strict=True):
                    parts = [{"type": "text", "text": "Listen."},
                             {"type": "input_audio", "input_audio": {"data": b64(sound), "format": "wav"}}]  # fmt: skip
                    body = {"messages": [{"role": "user", "content": parts}], "temperature": 0, "max_tokens": 6}
                    theirs = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
                    assert theirs["choices"][0]["message"]["content"] == ours
    finally:
        server.stop()


def test_a_webp_picture_is_sent_to_llama_cpp_as_png():
    """llama.cpp's reader has no WebP: the picture is re-encoded, its pixels kept, once a model that sees reads it
    (the HTTP edge reads its header only)."""
    import io

    from PIL import Image

    from engine.images import readable_image

    img = Image.open(io.BytesIO(gradient())).convert("RGB")
    out = io.BytesIO()
    img.save(out, format="WEBP", lossless=True)
    assert media.check_image(out.getvalue(), "messages[0].content[1]") == out.getvalue()
    png = readable_image(out.getvalue(), "messages[0].content[1]")
    assert png[:4] == b"\x89PNG"
    assert Image.open(io.BytesIO(png)).convert("RGB").tobytes() == img.tobytes()
    assert readable_image(gradient(), "x") == gradient()  # a PNG goes as it came
    assert readable_image(_jpeg(), "x") == _jpeg()  # and a JPEG


def _prompt_tokens(server, dialect: str, system: str | None, blocks: list[tuple[str, object]]) -> int:
    """The prompt tokens of one user turn of ``blocks`` (("text", str) or ("image", png)) after ``system``, as
    ``dialect`` counts them, each in its own request shape."""
    url = server.root
    if dialect == "openai":
        parts = [{"type": "text", "text": v} if k == "text" else {"type": "image_url", "image_url": {"url": data_url(v)}}
                 for k, v in blocks]  # fmt: skip
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": parts}]
        r = httpx.post(f"{url}/v1/chat/completions", headers=server.headers, timeout=120,
                       json={"model": VISION, "messages": msgs, "max_tokens": 1, "temperature": 0})  # fmt: skip
        return r.json()["usage"]["prompt_tokens"]
    if dialect == "anthropic":
        content = [{"type": "text", "text": v} if k == "text" else
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(v)}}
                   for k, v in blocks]  # fmt: skip
        body = {"model": VISION, "max_tokens": 1, "messages": [{"role": "user", "content": content}], "temperature": 0}
        r = httpx.post(f"{url}/v1/messages", headers=server.headers, timeout=120,
                       json=body | ({"system": [{"type": "text", "text": system}]} if system else {}))  # fmt: skip
        usage = r.json()["usage"]
        return usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    if dialect == "responses":
        content = [{"type": "input_text", "text": v} if k == "text" else {"type": "input_image", "image_url": data_url(v)}
                   for k, v in blocks]  # fmt: skip
        body = {"model": VISION, "input": [{"role": "user", "content": content}], "max_output_tokens": 16,
                "temperature": 0, "store": False} | ({"instructions": system} if system else {})  # fmt: skip
        r = httpx.post(f"{url}/v1/responses", headers=server.headers, timeout=120, json=body)
        return r.json()["usage"]["input_tokens"]
    text = "".join(v for k, v in blocks if k == "text")  # Ollama: one text, its pictures before it
    images = [b64(v) for k, v in blocks if k == "image"]
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text, **({"images": images} if images else {})}]
    r = httpx.post(f"{url}/api/chat", headers=server.headers, timeout=120, json={
        "model": VISION, "messages": msgs, "stream": False, "options": {"temperature": 0, "num_predict": 1}})  # fmt: skip
    return r.json()["prompt_eval_count"]


@pytest.mark.parametrize(
    "case",
    [
        ("Be brief.", [("text", QUESTION)]),
        (None, [("image", "checkerboard"), ("text", QUESTION)]),
        ("Be brief.", [("text", "Name a colour."), ("text", " Then a fruit.")]),
    ],
    ids=["system-and-text", "picture-then-text", "several-blocks"],
)
def test_the_same_conversation_is_the_same_prompt_in_every_dialect(vision_server, case):
    system, blocks = case
    blocks = [(k, PICTURES[v] if k == "image" else v) for k, v in blocks]
    counts = {d: _prompt_tokens(vision_server, d, system, blocks) for d in ("openai", "anthropic", "responses", "ollama")}
    assert len(set(counts.values())) == 1, counts
