"""GGUF files, read once for every backend: metadata, the vocabulary, tensor names.

The llama.cpp backend reads GGUF natively; the paged engine and MLX use this package, so a GGUF
vocabulary tokenizes the same in every backend. The catalog's header reader
(:mod:`engine.catalog.gguf_header`) reads headers from a byte stream (a download in progress,
a Hub range request), where a memory-mapped file is not to be had.
"""

from engine.gguf.names import hf_name
from engine.gguf.reader import metadata, open_gguf, read_metadata
from engine.gguf.vocab import Vocabulary, vocabulary_from_folder, vocabulary_from_gguf

__all__ = [
    "Vocabulary", "vocabulary_from_gguf", "vocabulary_from_folder", "open_gguf", "metadata", "read_metadata",
    "hf_name",
]  # fmt: skip
