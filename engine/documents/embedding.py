"""Embeddings for the index through Hearth's own path: a loaded backend's ``embed`` (what serves
/v1/embeddings), in this process or in the worker through its model manager."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Protocol

from engine.documents.errors import EmbeddingModelError
from engine.documents.minilm import DEFAULT_MODEL, ensure_default_model
from engine.errors import ContextLengthExceeded

log = logging.getLogger(__name__)

# One thread: a passage is a few hundred tokens, where an OpenMP team's barriers cost more than a second
# core gains, and on a busy machine (a chat model decoding beside it) two threads were 10-20x slower.
EMBED_THREADS = 1
# A passage longer than this many characters is embedded by its beginning (its keywords still index it all).
MAX_EMBED_CHARS = 2000


class Embedder(Protocol):
    """Turns texts into unit-length vectors with one model."""

    model: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def model_reference(model: str) -> str:
    """What to load for a collection's model name: the converted default model's path, or the name itself
    (a registered GGUF model such as nomic-embed or bge, or a path)."""
    if model == DEFAULT_MODEL:
        return str(ensure_default_model())
    return model


def _token_limit(backend) -> int | None:
    """The most tokens one text may have: the context, and never past the positions the model was trained
    for (a BERT model loaded with a longer context has no embeddings for the positions beyond 512)."""
    try:
        info = backend.info
        return max(8, min(info.n_ctx, info.n_ctx_train or info.n_ctx) - 4)
    except Exception:  # a backend that does not say
        return None


def _fit(backend, text: str, limit: int | None) -> str:
    if limit is None:
        return text
    n = len(backend.tokenize(text))
    while n > limit and len(text) > 16:
        text = text[: int(len(text) * limit / n * 0.95)]
        n = len(backend.tokenize(text))
    return text


def _embed_with(backend, texts: Sequence[str]) -> list[list[float]]:
    limit = _token_limit(backend)
    texts = [_fit(backend, t[:MAX_EMBED_CHARS], limit) or " " for t in texts]
    try:
        vectors, _ = backend.embed(texts)
        return vectors
    except ContextLengthExceeded:
        out = []
        for text in texts:  # find the one that is too long and embed its beginning
            limit = len(text)
            while True:
                try:
                    out.extend(backend.embed([text[:limit]])[0])
                    break
                except ContextLengthExceeded:
                    if limit < 16:
                        raise
                    limit //= 2
        return out


class BackendEmbedder:
    """Embeddings from a backend loaded in this process (the CLI, benchmarks).

    Args:
        backend: A loaded backend whose ``embed`` makes vectors.
        model: The collection's name for the model.
    """

    def __init__(self, backend, model: str) -> None:
        if not backend.info.can_embed:
            raise EmbeddingModelError(f"Model '{model}' cannot make embeddings; choose an embedding model.")
        self.backend = backend
        self.model = model
        self._lock = threading.Lock()

    @classmethod
    def open(cls, model: str = DEFAULT_MODEL, *, n_threads: int | None = EMBED_THREADS) -> BackendEmbedder:
        """Load ``model`` (the default one is set up on first use) on the llama.cpp backend.

        Raises:
            EmbeddingModelError: the default model cannot be set up.
            ModelNotFound, ModelLoadError: another model is unknown or unloadable.
        """
        from engine.backends import LoadOptions
        from engine.loading import open_model

        options = LoadOptions(n_seq_max=1, n_threads=n_threads)
        backend, _ = open_model(model_reference(model), options=options)
        try:
            return cls(backend, model)
        except BaseException:
            backend.close()
            raise

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            return _embed_with(self.backend, texts)

    def close(self) -> None:
        self.backend.close()


class ManagerEmbedder:
    """Embeddings from the worker's model manager: the model is loaded, shared and unloaded like any other.

    Args:
        manager: The worker's ModelManager.
        model: The collection's name for the model.
    """

    def __init__(self, manager, model: str = DEFAULT_MODEL) -> None:
        self.manager = manager
        self.model = model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # The converted default model is Hearth's own file; any other model is a registered name.
        lm = self.manager.acquire(model_reference(self.model), allow_paths=self.model == DEFAULT_MODEL)
        try:
            if not lm.backend.info.can_embed:
                raise EmbeddingModelError(f"Model '{self.model}' cannot make embeddings; choose an embedding model.")
            return _embed_with(lm.backend, texts)
        finally:
            self.manager.release(lm)

    def close(self) -> None:
        pass


def passage_text(text: str, heading: str | None, path: str) -> str:
    """What is embedded for a chunk: its heading (or file name) then its text, so the place informs the vector."""
    from pathlib import Path

    label = heading or Path(path).stem.replace("_", " ").replace("-", " ")
    return f"{label}\n{text}"
