"""Pictures for the vision tests, and the name `hearth serve --model FILE` gives the tiny vision model
(tests/engine/server/tiny_vision.py)."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from tests.engine.server import tiny_vision

VISION = tiny_vision.MODEL_PATH.stem  # the name `hearth serve --model FILE` gives it
QUESTION = "What is in this picture?"


def checkerboard() -> bytes:
    """A red and blue checkerboard, 48x40, as PNG."""
    from PIL import Image

    img = Image.new("RGB", (48, 40), (220, 30, 30))
    for x in range(48):
        for y in range(40):
            if (x // 8 + y // 8) % 2:
                img.putpixel((x, y), (20, 20, 200))
    return _png(img)


def gradient() -> bytes:
    """A green-to-violet gradient, 40x56, as PNG."""
    from PIL import Image

    img = Image.new("RGB", (40, 56))
    for x in range(40):
        for y in range(56):
            img.putpixel((x, y), (x * 6, y * 4, 128))
    return _png(img)


def wav(kind: str) -> bytes:
    """One second of 16 kHz mono sound as WAV: a 440 Hz tone ("tone") or seeded white noise ("noise")."""
    import math
    import random
    import wave

    rnd = random.Random(0)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        for i in range(16000):
            v = math.sin(2 * math.pi * 440 * i / 16000) if kind == "tone" else rnd.uniform(-1, 1)
            w.writeframesraw(struct.pack("<h", int(12000 * v)))
    return out.getvalue()


def _png(img) -> bytes:
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def bomb_png(width: int = 60_000, height: int = 60_000) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels (3.6 billion): a decompression bomb's header,
    refused before anything is decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
