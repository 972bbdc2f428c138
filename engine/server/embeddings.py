"""Embeddings as every dialect runs them: the input count checked, and the work stopped when the client goes."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from fastapi import Request

from engine.errors import EmbeddingsUnsupported, InvalidRequest
from engine.limits import check_embedding_inputs

T = TypeVar("T")

# How often a waiting embeddings request asks whether its client is still there.
CLIENT_POLL_SECONDS = 0.25


def check_inputs(texts: Sequence[str]) -> None:
    """Refuse more inputs than one request may embed (before a model is loaded for them).

    Raises:
        InvalidRequest: over :data:`engine.limits.MAX_EMBEDDING_INPUTS`.
    """
    check_embedding_inputs(len(texts))


async def for_client(request: Request, work: Callable[[Callable[[], bool]], T]) -> T:
    """``work(cancelled)`` off the event loop, where ``cancelled()`` turns true once the client disconnects
    (the backends ask it between two slices of their work).

    Raises:
        RequestCancelled: the client went away (nobody reads the answer).
        HearthError: what ``work`` raised.
    """
    gone = threading.Event()

    async def watch() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(CLIENT_POLL_SECONDS)
        gone.set()

    watcher = asyncio.create_task(watch())
    try:
        return await asyncio.to_thread(work, gone.is_set)
    finally:
        watcher.cancel()


async def embed_for_client(
    request: Request, lm, texts: Sequence[str], *, truncate: bool = False
) -> tuple[list[list[float]], int]:
    """The loaded model ``lm``'s ``backend.embed(texts)`` off the event loop, cancelled between slices once the client
    disconnects; ``truncate`` cuts a text longer than the context to fit instead of refusing it.

    Raises:
        EmbeddingsUnsupported: its backend makes no embeddings (named as asked: several names can share a backend).
        RequestCancelled: the client went away (nobody reads the answer).
        HearthError: what the backend raised.
    """
    backend = lm.backend
    if not backend.info.can_embed:
        raise EmbeddingsUnsupported(lm.model.name, backend.name)
    return await for_client(request, lambda cancelled: backend.embed(texts, cancelled=cancelled, truncate=truncate))


def shorten(vec: list[float], dims: int | None, model: str) -> list[float]:
    """The vector cut to its first ``dims`` values and normalised again (Matryoshka embeddings), as Ollama and
    OpenAI do (``dimensions``); None leaves it whole.

    Raises:
        InvalidRequest: ``dims`` is not from 1 to the vector's size.
    """
    if dims is None:
        return vec
    if not 1 <= dims <= len(vec):
        raise InvalidRequest(
            f"Model '{model}' makes {len(vec)}-dimensional embeddings; set 'dimensions' from 1 to {len(vec)}.",
            param="dimensions",
        )
    cut = vec[:dims]
    norm = math.sqrt(sum(v * v for v in cut)) or 1.0
    return [v / norm for v in cut]


__all__ = ["check_inputs", "embed_for_client", "for_client", "shorten"]
