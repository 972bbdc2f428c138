"""A small GGUF header parser that works on a byte stream: a local file or an HTTP body.

It reads key/values (arrays are skipped over, not kept, unless short and numeric) and, for local
files, the tensor infos for the parameter count. That is all Hearth needs, and it is far faster
than ``gguf.GGUFReader``, which turns every vocabulary entry into a numpy view.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

MAX_HEADER_BYTES = 64 * 1024 * 1024  # metadata lies well within this, even with a 256k vocabulary
_KEEP_ARRAY = 512  # numeric arrays up to this length are kept (per-layer head counts and the like)

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    """Reads exact byte counts from an iterator of chunks, up to ``limit`` bytes."""

    def __init__(self, chunks: Iterable[bytes], limit: int) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = bytearray()
        self._pos = 0
        self.consumed = 0
        self.limit = limit

    def read(self, n: int) -> bytes:
        while len(self._buf) - self._pos < n:
            if self.consumed > self.limit:
                raise ValueError("the GGUF header is larger than Hearth reads")
            try:
                chunk = next(self._it)
            except StopIteration:
                raise ValueError("the GGUF header ended early") from None
            del self._buf[: self._pos]
            self._pos = 0
            self._buf += chunk
            self.consumed += len(chunk)
        out = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.read(self.unpack("<Q")).decode("utf-8", errors="replace")


def _value(r: _Reader, vtype: int) -> Any:
    if vtype in _SCALARS:
        return r.unpack(_SCALARS[vtype])
    if vtype == _STRING:
        return r.string()
    if vtype == _ARRAY:
        etype = r.unpack("<I")
        count = r.unpack("<Q")
        if etype in _SCALARS:
            size = struct.calcsize(_SCALARS[etype])
            data = r.read(size * count)
            if count <= _KEEP_ARRAY:
                return list(struct.unpack(f"<{count}{_SCALARS[etype][1]}", data))
            return None
        for _ in range(count):  # strings (the vocabulary) or nested arrays: skipped over
            _value(r, etype)
        return None
    raise ValueError(f"unknown GGUF value type {vtype}")


def _prelude(r: _Reader) -> tuple[int, int, int]:
    if r.read(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    version = r.unpack("<I")
    if version not in (1, 2, 3):
        raise ValueError(f"unknown GGUF version {version}")
    if version == 1:
        return version, r.unpack("<I"), r.unpack("<I")
    return version, r.unpack("<Q"), r.unpack("<Q")


def read_gguf_kv(chunks: Iterable[bytes], *, limit: int = MAX_HEADER_BYTES, stop_at_tokenizer: bool = True) -> dict[str, Any]:
    """The key/values of a GGUF header read from ``chunks`` (e.g. an HTTP body).

    With ``stop_at_tokenizer``, reading stops at the first ``tokenizer.`` key, which in llama.cpp's
    files comes after the architecture's numbers, so the vocabulary is never fetched.

    Raises:
        ValueError: the bytes are not a GGUF header Hearth can read.
    """
    r = _Reader(chunks, limit)
    _, _, n_kv = _prelude(r)
    out: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        if stop_at_tokenizer and key.startswith("tokenizer."):
            break
        out[key] = _value(r, r.unpack("<I"))
    return out


def _file_chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    with path.open("rb") as f:
        while block := f.read(size):
            yield block


def read_gguf_file(path: Path) -> tuple[dict[str, Any], int]:
    """A local GGUF file's key/values (vocabulary skipped) and its parameter count (from tensor infos).

    Raises:
        ValueError: the file is not a GGUF file Hearth can read.
    """
    r = _Reader(_file_chunks(path), MAX_HEADER_BYTES)
    version, n_tensors, n_kv = _prelude(r)
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        value = _value(r, r.unpack("<I"))
        kv[key] = True if key == "tokenizer.chat_template" and value else value
    params = 0
    for _ in range(n_tensors):
        r.string()
        n_dims = r.unpack("<I")
        dims = struct.unpack(f"<{n_dims}{'I' if version == 1 else 'Q'}", r.read(n_dims * (4 if version == 1 else 8)))
        r.read(4 + 8)  # type, offset
        params += math.prod(dims)
    return kv, params


__all__ = ["read_gguf_kv", "read_gguf_file", "MAX_HEADER_BYTES"]
