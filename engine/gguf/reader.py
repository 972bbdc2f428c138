"""A GGUF file's metadata and tensors, read with the ``gguf`` library (memory-mapped)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from engine.errors import ModelLoadError


@cache
def reader_class() -> type:
    """``gguf.GGUFReader`` reading through a plain ndarray view of its memory map.

    The library takes every value (each of a vocabulary's tokens and merges: two per entry) as a
    slice of an ``np.memmap``, whose Python-level ``__getitem__`` and ``__array_finalize__`` make
    opening a 50k-token vocabulary take 3-4 s on a small CPU. The same slices of a plain view of
    the same mapping are the same bytes, read-only as the map is, and take about a quarter of that
    (benchmarks/gguf_open.py).
    """
    import gguf
    import numpy as np

    class Reader(gguf.GGUFReader):
        def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> Any:
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            dt = np.dtype(dtype)
            n = int(count)
            arr = plain[offset : offset + dt.itemsize * n].view(dt)[:n]
            order = self.byte_order if override_order is None else override_order
            return arr if order == "I" else arr.view(arr.dtype.newbyteorder(order))

    return Reader


def open_gguf(path: Path | str) -> Any:
    """The file as a ``gguf.GGUFReader`` (memory-mapped; tensors' ``data`` are views of the map).

    Raises:
        ModelLoadError: the file cannot be parsed (damaged, truncated, or not GGUF).
    """
    try:
        return reader_class()(path)
    except Exception as exc:  # the reader raises bare ValueError/IndexError/OSError on damaged files
        raise ModelLoadError(str(path), f"the GGUF file is damaged or truncated ({exc}).") from exc


def metadata(reader: Any) -> dict[str, Any]:
    """Every key of an open file's metadata as a plain Python value (str, int, float, bool or a list)."""
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the header's own fields (version, counts), not metadata
            continue
        try:
            out[key] = field.contents()
        except Exception:  # noqa: BLE001 - a value the library cannot decode is left out, not fatal
            continue
    return out


def read_metadata(path: Path | str) -> dict[str, Any]:
    """The metadata of the GGUF file at ``path``.

    Raises:
        ModelLoadError: the file cannot be parsed.
    """
    return metadata(open_gguf(path))


__all__ = ["open_gguf", "metadata", "read_metadata", "reader_class"]
