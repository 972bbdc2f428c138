"""A GGUF file's metadata and tensors, read with the ``gguf`` library (memory-mapped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import ModelLoadError


def open_gguf(path: Path | str) -> Any:
    """The file as a ``gguf.GGUFReader``.

    Raises:
        ModelLoadError: the file cannot be parsed (damaged, truncated, or not GGUF).
    """
    import gguf

    try:
        return gguf.GGUFReader(path)
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


__all__ = ["open_gguf", "metadata", "read_metadata"]
