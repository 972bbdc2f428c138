"""Pictures a projector has read lately, by content hash: their size and their preprocessed mtmd chunks.

Tokenizing a picture means decoding the file and resizing and slicing it (tens of milliseconds for a photo),
even when its KV is already in the prefix cache and nothing will be encoded. A picture seen before is instead
tokenized from a placeholder of its size (mtmd lays it out without touching pixels) and its chunks are copies
of the ones kept here, ready to encode should its KV have been dropped since.

What is kept is the model's input, resized and in floats: a few MB a picture for most projectors, some tens of
MB for a large photo cut into many slices (SmolVLM's 512-pixel tiles), hence the small limits.
"""

# llama-cpp-python types mtmd handles as classes and pointers; at run time they are ints passed through ctypes.
# pyright: reportArgumentType=false, reportCallIssue=false, reportOptionalSubscript=false

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from llama_cpp import mtmd_cpp as mtmd


@dataclass(frozen=True, slots=True)
class KnownPicture:
    """A picture's size, and fresh copies of its chunks (in the order mtmd made them) owned by the caller."""

    width: int
    height: int
    chunks: tuple[int, ...]


class PictureCache:
    """The last ``max_entries`` pictures (at most ``max_pixels`` together), least recently used out first.

    Thread-safe: requests are tokenized on their own threads.
    """

    def __init__(self, max_entries: int = 4, max_pixels: int = 32_000_000) -> None:
        self.max_entries = max_entries
        self.max_pixels = max_pixels
        self._entries: OrderedDict[str, tuple[int, int, tuple[int, ...]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0  # pictures tokenized from the cache

    def take(self, digest: str) -> KnownPicture | None:
        """The picture with hash ``digest``, with copies of its chunks (the caller frees them), or None."""
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            self._entries.move_to_end(digest)
            width, height, kept = entry
            copies = tuple(mtmd.mtmd_input_chunk_copy(c) for c in kept)
            self.hits += 1
        return KnownPicture(width, height, copies)

    def keep(self, digest: str, width: int, height: int, chunks: list[int]) -> None:
        """Keep copies of ``chunks`` (those of one picture, in order) under ``digest``."""
        if not chunks or width * height > self.max_pixels:
            return
        with self._lock:
            if digest in self._entries:
                return
            self._entries[digest] = (width, height, tuple(mtmd.mtmd_input_chunk_copy(c) for c in chunks))
            while len(self._entries) > self.max_entries or self._pixels() > self.max_pixels:
                _, (_, _, old) = self._entries.popitem(last=False)
                for c in old:
                    mtmd.mtmd_input_chunk_free(c)

    def _pixels(self) -> int:
        return sum(w * h for w, h, _ in self._entries.values())

    def close(self) -> None:
        with self._lock:
            for _, _, kept in self._entries.values():
                for c in kept:
                    mtmd.mtmd_input_chunk_free(c)
            self._entries.clear()


__all__ = ["KnownPicture", "PictureCache"]
