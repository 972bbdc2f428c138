"""What the backends' facades share: cancellation, statistics, closing and the loaded model's facts, written
once over the loop each facade feeds its requests to (llama.cpp's decode loop, MLX's generation loop, the paged
engine's thread or process). Each backend supplies only what differs: its model's facts, the figures it adds
to the loop's, and what it frees beside the loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from engine.backends.base import BackendStats, ModelInfo, ModelSpec
from engine.infill import FimTokens, infill_tokens, no_infill
from engine.types import GenerationRequest


class RequestLoop(Protocol):
    """The loop that runs a backend's requests (on a thread of this process or in a process of its own)."""

    def cancel(self, request_id: str) -> None: ...

    def cancel_all(self) -> None: ...

    def stats(self) -> BackendStats: ...

    def close(self) -> None: ...


L = TypeVar("L", bound=RequestLoop)


class BackendFacade(Generic[L]):
    """The Backend protocol's bookkeeping over ``loop`` (None before a model is loaded and after ``close``)."""

    name: str

    def __init__(self) -> None:
        self.loop: L | None = None
        self.spec: ModelSpec | None = None

    def not_loaded(self) -> RuntimeError:
        """The error for a call that needs a model when none is loaded."""
        return RuntimeError(f"the {self.name} backend has no model loaded")

    @property
    def info(self) -> ModelInfo:
        """Facts about the loaded model.

        Raises:
            RuntimeError: no model is loaded.
        """
        if self.spec is None:
            raise self.not_loaded()
        return self._model_info(self.spec)

    def _named(self, asked: str | None, fallback: str) -> str:
        """The model as a refusal names it: as the request ``asked`` for it (several names can answer from these
        weights, engine.pool), else as it was loaded, else ``fallback``."""
        return asked or (self.spec.name if self.spec is not None else fallback)

    def _model_info(self, spec: ModelSpec) -> ModelInfo:
        """The loaded model's facts (``spec``: what was asked to load)."""
        raise NotImplementedError

    def _infill_tokens(self, request: GenerationRequest, fim: FimTokens | None, encode: Callable[[str], list[int]],
                       bos: int | None) -> list[int]:  # fmt: skip
        """The prompt of a fill-in-the-middle ``request`` (engine.infill) in the loaded model's vocabulary: its
        markers ``fim``, ``encode`` reading text as text, and the ``bos`` it starts with (None: none).

        Raises:
            InvalidRequest: the vocabulary has no markers.
        """
        if request.infill is None:
            raise ValueError("not a fill-in-the-middle request")
        if fim is None:
            raise no_infill(self._named(request.model, "this model"))
        return infill_tokens(request.infill, request.prompt or "", fim=fim, encode=encode, bos=bos, n_ctx=self.info.n_ctx)

    def cancel(self, request_id: str) -> None:
        if self.loop is not None:
            self.loop.cancel(request_id)

    def cancel_all(self) -> None:
        """Cancel every generation (at shutdown); each stream ends with its final chunk."""
        if self.loop is not None:
            self.loop.cancel_all()

    def stats(self) -> BackendStats | None:
        if self.loop is None:
            return None
        return self._add_details(self.loop.stats())

    def _add_details(self, stats: BackendStats) -> BackendStats:
        """The loop's ``stats`` with the backend's own figures added (none by default)."""
        return stats

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()
            self.loop = None
        self._close_rest()

    def _close_rest(self) -> None:
        """Free what the backend holds beside its loop (after the loop is closed)."""


__all__ = ["BackendFacade", "RequestLoop"]
