"""Pictures as llama.cpp's reader takes them: checked, and decoded only where it cannot read them itself.

:func:`image_header` reads a picture's header alone (its format and pixel count: a decompression bomb is
refused before it is decoded); the HTTP edge runs it on every picture of a request. :func:`readable_image`
gives the bytes a model is fed, once the model is known to see: a PNG or JPEG whose structure is whole (PNG
chunks with right checksums up to IEND, a JPEG's end marker) goes on undecoded, llama.cpp decodes it once and
refuses a body it cannot read naming the part; any other file is decoded in full, so a truncated or broken one
is refused naming the part, and a format llama.cpp's reader lacks (WebP, TIFF ...) is re-encoded as PNG. A
text-only model refuses a picture without decoding it.
"""

from __future__ import annotations

import io
import struct
import zlib

from engine.errors import InvalidRequest

MAX_IMAGE_PIXELS = 40_000_000  # a 8K photo is 33 million
# What llama.cpp's image reader (stb_image) decodes itself; anything else Pillow reads is sent as PNG.
NATIVE_FORMATS = frozenset({"PNG", "JPEG", "BMP", "GIF"})


def image_header(data: bytes, where: str) -> str:
    """The picture's format, from its header alone, after checking its pixel count.

    Raises:
        InvalidRequest: too many pixels, or not a picture Pillow knows (naming ``where``).
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:  # reads the header only
            width, height = img.size
            if width * height > MAX_IMAGE_PIXELS:
                raise InvalidRequest(
                    f"{where} has {width}x{height} pixels, more than the {MAX_IMAGE_PIXELS // 1_000_000} million "
                    "allowed; send a smaller image.", param=where,
                )  # fmt: skip
            return img.format or ""
    except InvalidRequest:
        raise
    except Image.DecompressionBombError as exc:
        raise InvalidRequest(f"{where} has too many pixels; send a smaller image.", param=where) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InvalidRequest(f"{where} is not a readable image (broken or truncated); send a PNG or JPEG.", param=where) from exc


def readable_image(data: bytes, where: str) -> bytes:
    """The picture's bytes in a format llama.cpp reads, after checking its pixel count and integrity.

    Raises:
        InvalidRequest: too many pixels, or not a readable image (naming ``where``).
    """
    from PIL import Image, UnidentifiedImageError

    fmt = image_header(data, where)
    if whole(data, fmt):  # llama.cpp decodes it once; a body it cannot read is a 400 naming the part there
        return data
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # the whole file: a truncated or corrupt one fails here
            if fmt in NATIVE_FORMATS:
                return data
            out = io.BytesIO()
            img.convert("RGBA" if "A" in img.getbands() else "RGB").save(out, format="PNG")
            return out.getvalue()
    except Image.DecompressionBombError as exc:
        raise InvalidRequest(f"{where} has too many pixels; send a smaller image.", param=where) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InvalidRequest(f"{where} is not a readable image (broken or truncated); send a PNG or JPEG.", param=where) from exc


def whole(data: bytes, fmt: str) -> bool:
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


__all__ = ["MAX_IMAGE_PIXELS", "NATIVE_FORMATS", "image_header", "readable_image", "whole"]
