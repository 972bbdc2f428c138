"""A small GGUF header parser that works on a byte stream: a local file or an HTTP body.

It reads key/values (arrays are skipped over, not kept, unless short and numeric) and, for local
files, the tensor infos for the parameter count. That is all Hearth needs, and it is far faster
than ``gguf.GGUFReader``, which turns every vocabulary entry into a numpy view.

Every count and length in a header is checked against what is left to read before it is used, so
a truncated or hostile file (a tensor count of 2**63, a string longer than the file, arrays nested
without end) is a :class:`ValueError` naming the problem, never a long loop, a huge allocation or
a crash. :func:`check_gguf_layout` also checks that every tensor's data lies inside the file, which
is what a truncated download or copy gets wrong.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_HEADER_BYTES = 64 * 1024 * 1024  # metadata lies well within this, even with a 256k vocabulary
_KEEP_ARRAY = 512  # numeric arrays up to this length are kept (per-layer head counts and the like)

_U64 = struct.Struct("<Q")
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_NESTING = 8  # arrays of arrays: real files nest none
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, a one-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset


class _Reader:
    """Reads exact byte counts from an iterator of chunks, up to ``limit`` bytes."""

    def __init__(self, chunks: Iterable[bytes], limit: int, *, end_name: str = "the bytes Hearth reads of a header") -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = bytearray()
        self._pos = 0
        self.consumed = 0
        self.limit = limit
        self.end_name = end_name

    @property
    def position(self) -> int:
        """Bytes read so far."""
        return self.consumed - (len(self._buf) - self._pos)

    @property
    def remaining(self) -> int:
        """Most bytes still allowed (the end of the file, or the header limit)."""
        return max(0, self.limit - self.position)

    def read(self, n: int) -> bytes:
        if n > self.remaining:
            raise ValueError(f"a length in the header ({n} bytes) runs past {self.end_name}")
        self._fill(n)
        out = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n
        return out

    def _fill(self, n: int) -> None:
        """At least ``n`` bytes buffered past the position (``n`` checked against the limit by the caller)."""
        while len(self._buf) - self._pos < n:
            try:
                chunk = next(self._it)
            except StopIteration:
                raise ValueError("the GGUF header ended early") from None
            del self._buf[: self._pos]
            self._pos = 0
            self._buf += chunk
            self.consumed += len(chunk)

    def skip_strings(self, count: int) -> None:
        """Step over ``count`` strings (each an 8-byte length, then its bytes) without copying or decoding them:
        a vocabulary's hundred thousand entries, which :meth:`string` would turn into as many objects."""
        unpack_from = _U64.unpack_from
        for _ in range(count):
            if len(self._buf) - self._pos < 8:
                self._check(8)
                self._fill(8)
            n = unpack_from(self._buf, self._pos)[0]
            self._pos += 8
            if len(self._buf) - self._pos < n:
                self._check(n)
                self._fill(n)
            self._pos += n
        if self.position > self.limit:  # what lay in the buffer already was not checked string by string
            raise ValueError(f"an array of {count} strings runs past {self.end_name}")

    def _check(self, n: int) -> None:
        if n > self.remaining:
            raise ValueError(f"a length in the header ({n} bytes) runs past {self.end_name}")

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.read(self.unpack("<Q")).decode("utf-8", errors="replace")


def _value(r: _Reader, vtype: int, depth: int = 0) -> Any:
    if vtype in _SCALARS:
        return r.unpack(_SCALARS[vtype])
    if vtype == _STRING:
        return r.string()
    if vtype == _ARRAY:
        if depth >= _MAX_NESTING:
            raise ValueError(f"its arrays nest more than {_MAX_NESTING} deep")
        etype = r.unpack("<I")
        count = r.unpack("<Q")
        if etype in _SCALARS:
            size = struct.calcsize(_SCALARS[etype])
            data = r.read(size * count)
            if count <= _KEEP_ARRAY:
                return list(struct.unpack(f"<{count}{_SCALARS[etype][1]}", data))
            return None
        if etype not in (_STRING, _ARRAY):
            raise ValueError(f"unknown GGUF value type {etype}")
        if count * 8 > r.remaining:  # every string or array starts with an 8-byte length
            raise ValueError(f"an array of {count} entries runs past {r.end_name}")
        if etype == _STRING:  # the vocabulary, its merges: skipped over
            r.skip_strings(count)
            return None
        for _ in range(count):  # nested arrays: skipped over
            _value(r, etype, depth + 1)
        return None
    raise ValueError(f"unknown GGUF value type {vtype}")


def _prelude(r: _Reader) -> tuple[int, int, int]:
    if r.read(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    version = r.unpack("<I")
    if version not in (1, 2, 3):
        raise ValueError(f"unknown GGUF version {version}")
    if version == 1:
        n_tensors, n_kv = r.unpack("<I"), r.unpack("<I")
    else:
        n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    if n_kv * _MIN_KV_BYTES > r.remaining:
        raise ValueError(f"it declares {n_kv} metadata entries, more than {r.end_name} can hold")
    if n_tensors * _MIN_TENSOR_INFO_BYTES > r.remaining:
        raise ValueError(f"it declares {n_tensors} tensors, more than {r.end_name} can hold")
    return version, n_tensors, n_kv


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


def _file_reader(path: Path) -> tuple[_Reader, int]:
    size = path.stat().st_size
    return _Reader(_file_chunks(path), min(size, MAX_HEADER_BYTES), end_name="the end of the file"), size


def _tensor_infos(r: _Reader, version: int, n_tensors: int) -> list[tuple[str, tuple[int, ...], int, int]]:
    """``(name, dims, ggml type, offset)`` of each tensor info."""
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ValueError(f"tensor '{name[:80]}' has {n_dims} dimensions (at most {MAX_DIMS} are possible)")
        dims = struct.unpack(f"<{n_dims}{'I' if version == 1 else 'Q'}", r.read(n_dims * (4 if version == 1 else 8)))
        if math.prod(dims) >= 1 << 62:
            raise ValueError(f"tensor '{name[:80]}' declares an impossible size {dims}")
        ggml_type = r.unpack("<I")
        infos.append((name, dims, ggml_type, r.unpack("<Q")))
    return infos


def read_gguf_file(path: Path) -> tuple[dict[str, Any], int]:
    """A local GGUF file's key/values (vocabulary skipped) and its parameter count (from tensor infos),
    once :func:`check_gguf_layout`'s checks have passed.

    Raises:
        ValueError: the file is not a GGUF file Hearth can read, or it is truncated.
    """
    kv, infos, data_start, size = _layout(path)
    _check_tensor_data(infos, data_start, size)
    if kv.get("tokenizer.chat_template"):
        kv["tokenizer.chat_template"] = True
    return kv, sum(math.prod(dims) for _, dims, _, _ in infos)


# ggml tensor type ids -> names (the weights-per-tensor-type breakdown of `hearth fit`).
GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
    11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
    19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
    27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip


def read_gguf_tensors(path: Path) -> tuple[dict[str, Any], list[tuple[str, str, int, tuple[int, ...]]]]:
    """A local GGUF file's key/values and its tensors as ``(name, type name, bytes, dims)``.

    Each tensor's bytes are the distance to the next tensor's data (the last one's, to the end of
    the file), so alignment padding is counted where llama.cpp maps it.

    Raises:
        ValueError: the file is not a GGUF file Hearth can read.
    """
    kv, raw, data_start, size = _layout(path)
    infos = [(name, GGML_TYPE_NAMES.get(t, f"type {t}"), offset, dims) for name, dims, t, offset in raw]
    data_bytes = size - data_start
    ends = sorted({info[2] for info in infos} | {data_bytes})
    after = {a: b for a, b in zip(ends, ends[1:], strict=False)}
    return kv, [(name, kind, max(0, after.get(offset, offset) - offset), dims) for name, kind, offset, dims in infos]


def _layout(path: Path) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, int]], int, int]:
    """Key/values, tensor infos, where the tensor data starts, and the file's size."""
    r, size = _file_reader(path)
    version, n_tensors, n_kv = _prelude(r)
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = _value(r, r.unpack("<I"))
    infos = _tensor_infos(r, version, n_tensors)
    alignment = kv.get("general.alignment") or 32
    if not isinstance(alignment, int) or not 1 <= alignment <= 1 << 20:
        raise ValueError(f"its alignment {alignment!r} is not a sensible number of bytes")
    data_start = -(-r.position // alignment) * alignment
    return kv, infos, data_start, size


@dataclass(frozen=True, slots=True)
class GGUFVocabulary:
    """A GGUF file's vocabulary as llama.cpp reads it: the tokenizer's kind (``tokenizer.ggml.model``), each
    token's text and whether llama.cpp takes it as unused padding."""

    kind: str
    tokens: list[bytes]
    unused: list[bool]


_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_UNUSED = 3, 5  # llama.cpp's LLAMA_TOKEN_TYPE_*


def read_gguf_vocabulary(path: Path) -> GGUFVocabulary:
    """The vocabulary of the local GGUF file at ``path``.

    A token is unused where its type says so, or, as llama.cpp decides on loading, where it is a control
    token whose text contains "unused" (a family's padding tokens).

    Raises:
        ValueError: the file is not a GGUF file Hearth can read, or it has no vocabulary.
    """
    r, _ = _file_reader(path)
    _, _, n_kv = _prelude(r)
    kind, tokens, types = None, None, None
    for _ in range(n_kv):
        key = r.string()
        vtype = r.unpack("<I")
        if key == "tokenizer.ggml.tokens" and vtype == _ARRAY:
            tokens = _string_array(r)
        elif key == "tokenizer.ggml.token_type" and vtype == _ARRAY:
            types = _int_array(r)
        else:
            value = _value(r, vtype)
            if key == "tokenizer.ggml.model":
                kind = value
        if kind is not None and tokens is not None and types is not None:
            break
    if not isinstance(kind, str) or tokens is None:
        raise ValueError("it has no vocabulary (tokenizer.ggml.model and tokenizer.ggml.tokens)")
    if types is None or len(types) != len(tokens):
        types = [1] * len(tokens)
    unused = [
        t == _TOKEN_TYPE_UNUSED or (t == _TOKEN_TYPE_CONTROL and b"unused" in text) for t, text in zip(types, tokens, strict=True)
    ]
    return GGUFVocabulary(kind, tokens, unused)


def _string_array(r: _Reader) -> list[bytes]:
    etype, count = r.unpack("<I"), r.unpack("<Q")
    if etype != _STRING:
        raise ValueError("its tokenizer.ggml.tokens is not a list of strings")
    if count * 8 > r.remaining:
        raise ValueError(f"an array of {count} entries runs past {r.end_name}")
    return [r.read(r.unpack("<Q")) for _ in range(count)]


def _int_array(r: _Reader) -> list[int]:
    etype, count = r.unpack("<I"), r.unpack("<Q")
    fmt = _SCALARS.get(etype)
    if fmt is None or fmt[1] in "f?d":
        raise ValueError("its tokenizer.ggml.token_type is not a list of integers")
    data = r.read(struct.calcsize(fmt) * count)
    return list(struct.unpack(f"<{count}{fmt[1]}", data))


def vocabulary_mismatch(model: GGUFVocabulary, other: GGUFVocabulary) -> str | None:
    """How ``other``'s vocabulary differs from ``model``'s, or None where a token id means the same text in both:
    the same kind of tokenizer and the same text for every id they share; where one has more tokens, its extra
    ones are unused padding (a family's small and large models are often padded to other sizes)."""
    if model.kind != other.kind:
        return f"its tokenizer is of another kind ({other.kind!r}, the model's {model.kind!r})"
    n_model, n_other = len(model.tokens), len(other.tokens)
    for i, (a, b) in enumerate(zip(model.tokens, other.tokens, strict=False)):
        if a != b:
            return f"token {i} is {_show(b)} in it and {_show(a)} in the model ({n_other} tokens against {n_model})"
    longer = model if n_model > n_other else other
    for i in range(min(n_model, n_other), len(longer.tokens)):
        if not longer.unused[i]:
            return f"it has {n_other} tokens and the model {n_model} (token {i} is {_show(longer.tokens[i])})"
    return None


def _show(text: bytes) -> str:
    return repr(text.decode("utf-8", errors="replace")[:40])


# ggml tensor type id -> (values per block, bytes per block), as ggml lays them out.
GGML_BLOCK_SIZES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17),
}  # fmt: skip


def check_gguf_layout(path: Path) -> None:
    """Check that a local GGUF file's header is sound and every tensor's data lies inside the file.

    Raises:
        ValueError: it does not (the reason in a few words: truncated, or a header that lies).
    """
    _kv, infos, data_start, size = _layout(path)
    _check_tensor_data(infos, data_start, size)


def _check_tensor_data(infos: list[tuple[str, tuple[int, ...], int, int]], data_start: int, size: int) -> None:
    if infos and data_start > size:
        raise ValueError("its tensor data is missing (the file ends within the header)")
    data_bytes = size - data_start
    for name, dims, ggml_type, offset in infos:
        nbytes = 0
        block = GGML_BLOCK_SIZES.get(ggml_type)
        if block is not None:
            per_block, block_bytes = block
            if dims[0] % per_block:
                raise ValueError(f"tensor '{name[:80]}' has a row of {dims[0]} values, not a whole number of blocks")
            nbytes = math.prod(dims) // per_block * block_bytes
        if offset + nbytes > data_bytes:
            raise ValueError(
                f"tensor '{name[:80]}' lies past the end of the file ({offset + nbytes} bytes of data needed, "
                f"{data_bytes} present): the file is truncated or damaged"
            )


__all__ = [
    "GGML_BLOCK_SIZES",
    "GGML_TYPE_NAMES",
    "GGUFVocabulary",
    "MAX_HEADER_BYTES",
    "check_gguf_layout",
    "read_gguf_file",
    "read_gguf_kv",
    "read_gguf_tensors",
    "read_gguf_vocabulary",
    "vocabulary_mismatch",
]
