"""Pictures and sounds in requests, for every dialect: each route maps its own part shape (OpenAI's
``image_url`` and ``input_audio``, Responses' ``input_image``, Anthropic's ``image`` block, Ollama's ``images``)
onto these readers, which decode, fetch and check the file once, the same way for all.

An image is checked before any model is chosen: its byte size, then its format and pixel count from the header
(a decompression bomb is refused before it is decoded). It is decoded only for a model that sees
(:mod:`engine.images`), so a picture sent to a text-only model is refused without the work. A remote
``http(s)`` URL is a request the server would make on the user's behalf: refused unless the server runs with
``--allow-image-urls``, and then fetched with a size cap and a timeout.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx

from engine.errors import InvalidRequest
from engine.images import MAX_IMAGE_PIXELS, image_header
from engine.types import MEDIA_MARKER, ChatMessage, MediaInput

MAX_MEDIA_BYTES = 20 * 1024 * 1024  # one picture or sound
FETCH_TIMEOUT_SECONDS = 10.0
_AUDIO_FORMATS = ("wav", "mp3", "flac")


def _b64(data: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(data.strip(), validate=False)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"{where} is not valid base64; send the file's bytes base64-encoded.", param=where) from exc
    if not raw:
        said = "is not valid base64" if data.strip() else "is empty"  # ("@@@" holds no base64 character at all)
        raise InvalidRequest(f"{where} {said}; send the file's bytes base64-encoded.", param=where)
    if len(raw) > MAX_MEDIA_BYTES:
        raise InvalidRequest(f"{where} is larger than {MAX_MEDIA_BYTES // 2**20} MB; send a smaller file.", param=where)
    return raw


def check_image(data: bytes, where: str) -> bytes:
    """The image's bytes after checking its size and, from its header, its format and pixel count: what every
    picture of a request gets before a model is chosen (decoding waits for a model that sees:
    :func:`engine.images.readable_image`).

    Raises:
        InvalidRequest: too large, too many pixels, or not an image (naming ``where``).
    """
    if len(data) > MAX_MEDIA_BYTES:
        raise InvalidRequest(f"{where} is larger than {MAX_MEDIA_BYTES // 2**20} MB; send a smaller image.", param=where)
    image_header(data, where)
    return data


def image_from_base64(data: str, where: str) -> MediaInput:
    """A base64-encoded image (Anthropic's and Ollama's shape), checked.

    Raises:
        InvalidRequest: not base64, or not an image that can be read.
    """
    return MediaInput("image", check_image(_b64(data, where), where), where)


def image_from_url(url: str, where: str, *, allow_remote: bool) -> MediaInput:
    """An image given by URL (OpenAI's and Responses' shape): a ``data:`` URL, or a fetched ``http(s)`` one.

    Raises:
        InvalidRequest: a remote URL without ``--allow-image-urls``, a fetch that fails, or a bad image.
    """
    if url.startswith("data:"):
        header, sep, payload = url.partition(",")
        if not sep or not header.endswith(";base64"):
            raise InvalidRequest(f"{where} must be a base64 data URL (data:image/png;base64,...).", param=where)
        return image_from_base64(payload, where)
    if url.startswith(("http://", "https://")):
        if not allow_remote:
            raise InvalidRequest(
                f"{where} is a remote URL, which this server does not fetch; send the image as a data: URL, "
                "or start the server with --allow-image-urls.", param=where,
            )  # fmt: skip
        return MediaInput("image", check_image(_fetch(url, where), where), where)
    raise InvalidRequest(f"{where} must be a data: URL (or an http(s) URL with --allow-image-urls).", param=where)


def _fetch(url: str, where: str) -> bytes:
    """The body at ``url``, at most :data:`MAX_MEDIA_BYTES`, within :data:`FETCH_TIMEOUT_SECONDS`."""
    try:
        with httpx.Client(timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=True, max_redirects=3) as client:
            with client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    raise InvalidRequest(f"{where}: fetching the image gave HTTP {resp.status_code}.", param=where)
                body = bytearray()
                for piece in resp.iter_bytes():
                    body += piece
                    if len(body) > MAX_MEDIA_BYTES:
                        raise InvalidRequest(
                            f"{where} is larger than {MAX_MEDIA_BYTES // 2**20} MB; send a smaller image.", param=where
                        )
                return bytes(body)
    except httpx.HTTPError as exc:
        raise InvalidRequest(f"{where}: the image could not be fetched ({type(exc).__name__}); check the URL.", param=where) from exc


def audio_from_base64(data: str, fmt: str | None, where: str) -> MediaInput:
    """A base64-encoded sound (OpenAI's ``input_audio``): WAV, MP3 or FLAC, checked by its header.

    Raises:
        InvalidRequest: not base64, an unknown format, or bytes that are not that kind of file.
    """
    if fmt is not None and fmt.lower() not in _AUDIO_FORMATS:
        raise InvalidRequest(f"{where}: audio format '{fmt}' is not supported; send WAV, MP3 or FLAC.", param=where)
    raw = _b64(data, where)
    is_wav = raw[:4] == b"RIFF" and raw[8:12] == b"WAVE"
    is_mp3 = raw[:3] == b"ID3" or (len(raw) > 1 and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0)
    if not (is_wav or is_mp3 or raw[:4] == b"fLaC"):
        raise InvalidRequest(f"{where} is not a WAV, MP3 or FLAC file; send one of those.", param=where)
    return MediaInput("audio", raw, where)


def marker_text(text_parts: Sequence[str | None]) -> str:
    """Message text with a :data:`MEDIA_MARKER` for each None (a media part), joined as text parts are."""
    return "".join(MEDIA_MARKER if t is None else t for t in text_parts)


def capabilities(mmproj: Path | None) -> list[str]:
    """What a model paired with the projector ``mmproj`` takes in besides text: ``"vision"``, ``"audio"``."""
    if mmproj is None:
        return []
    from engine.backends.llamacpp.media import projector_capabilities

    vision, audio = projector_capabilities(mmproj)
    return [name for name, has in (("vision", vision), ("audio", audio)) if has]


def with_media(messages: Sequence[ChatMessage], media: Sequence[Sequence[MediaInput]]) -> tuple[ChatMessage, ...]:
    """``messages`` with each one's pictures and sounds attached (``media`` in the same order)."""
    return tuple(replace(m, media=tuple(items)) if items else m for m, items in zip(messages, media, strict=True))


__all__ = [
    "MAX_IMAGE_PIXELS", "MAX_MEDIA_BYTES", "audio_from_base64", "capabilities", "check_image", "image_from_base64", "image_from_url",
    "marker_text", "with_media",
]  # fmt: skip
