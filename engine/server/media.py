"""Pictures and sounds in requests, for every dialect: each route maps its own part shape (OpenAI's
``image_url`` and ``input_audio``, Responses' ``input_image``, Anthropic's ``image`` block, Ollama's ``images``)
onto these readers, which decode, fetch and check the file once, the same way for all.

An image is checked before any model sees it: its byte size, then its pixel count from the header (a
decompression bomb is refused before it is decoded), then its integrity. A PNG or JPEG whose structure is
whole (PNG chunks with right checksums up to IEND, a JPEG's end marker) goes on undecoded: llama.cpp decodes
it once, and refuses a body it cannot read naming the part. Any other file is decoded in full here, so a
truncated or broken one is refused naming the part. Formats llama.cpp's reader lacks (WebP, TIFF ...) are re-encoded as PNG. A remote
``http(s)`` URL is a request the server would make on the user's behalf: refused unless the server runs with
``--allow-image-urls``, and then fetched with a size cap and a timeout.
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx

from engine.errors import InvalidRequest
from engine.types import MEDIA_MARKER, ChatMessage, MediaInput

MAX_MEDIA_BYTES = 20 * 1024 * 1024  # one picture or sound
MAX_IMAGE_PIXELS = 40_000_000  # a 8K photo is 33 million
FETCH_TIMEOUT_SECONDS = 10.0
# What llama.cpp's image reader (stb_image) decodes itself; anything else Pillow reads is sent as PNG.
_NATIVE_FORMATS = frozenset({"PNG", "JPEG", "BMP", "GIF"})
_AUDIO_FORMATS = ("wav", "mp3", "flac")


def _b64(data: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(data.strip(), validate=False)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"{where} is not valid base64; send the file's bytes base64-encoded.", param=where) from exc
    if not raw:
        raise InvalidRequest(f"{where} is empty; send the file's bytes base64-encoded.", param=where)
    if len(raw) > MAX_MEDIA_BYTES:
        raise InvalidRequest(f"{where} is larger than {MAX_MEDIA_BYTES // 2**20} MB; send a smaller file.", param=where)
    return raw


def check_image(data: bytes, where: str) -> bytes:
    """The image's bytes in a format llama.cpp reads, after checking its size, pixel count and integrity.

    Raises:
        InvalidRequest: too large, too many pixels, or not a readable image (naming ``where``).
    """
    from PIL import Image, UnidentifiedImageError

    if len(data) > MAX_MEDIA_BYTES:
        raise InvalidRequest(f"{where} is larger than {MAX_MEDIA_BYTES // 2**20} MB; send a smaller image.", param=where)
    try:
        with Image.open(io.BytesIO(data)) as img:  # reads the header only
            width, height = img.size
            if width * height > MAX_IMAGE_PIXELS:
                raise InvalidRequest(
                    f"{where} has {width}x{height} pixels, more than the {MAX_IMAGE_PIXELS // 1_000_000} million "
                    "allowed; send a smaller image.", param=where,
                )  # fmt: skip
            fmt = img.format or ""
            if _whole(data, fmt):  # llama.cpp decodes it once; a body it cannot read is a 400 naming the part there
                return data
            img.load()  # the whole file: a truncated or corrupt one fails here
            if fmt in _NATIVE_FORMATS:
                return data
            out = io.BytesIO()
            img.convert("RGBA" if "A" in img.getbands() else "RGB").save(out, format="PNG")
            return out.getvalue()
    except InvalidRequest:
        raise
    except Image.DecompressionBombError as exc:
        raise InvalidRequest(f"{where} has too many pixels; send a smaller image.", param=where) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InvalidRequest(f"{where} is not a readable image (broken or truncated); send a PNG or JPEG.", param=where) from exc


def _whole(data: bytes, fmt: str) -> bool:
    """Whether a PNG or JPEG is complete by its structure, read without decoding its pixels: every PNG chunk
    within the file with a right checksum up to IEND, a JPEG ending with its end-of-image marker. Anything else
    (another format, trailing bytes, a cut file) is left to a full decode."""
    if fmt == "JPEG":
        return data.endswith(b"\xff\xd9")
    if fmt != "PNG":
        return False
    view, at = memoryview(data), 8  # past the signature
    while at + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, at)
        end = at + 12 + length
        if end > len(data) or zlib.crc32(view[at + 4 : end - 4]) != struct.unpack_from(">I", data, end - 4)[0]:
            return False
        if data[at + 4 : at + 8] == b"IEND":
            return end == len(data)
        at = end
    return False


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
