"""What some backends do beyond the :class:`~engine.backends.base.Backend` protocol: rerank, and tokenize
the way llama-server's ``/tokenize`` and ``/detokenize`` do. The server asks ``isinstance(backend, ...)``
and refuses the request with a clear sentence for a backend that cannot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Reranks(Protocol):
    """A backend that scores how relevant documents are to a query (a cross-encoder reranker)."""

    def can_rerank(self) -> bool:
        """Whether the loaded model is a reranker."""
        ...

    def rerank(
        self, query: str, documents: Sequence[str], *, cancelled: Callable[[], bool] | None = None
    ) -> tuple[list[float], int]:
        """One score per document, in order (higher: more relevant), and the tokens scored.

        Raises:
            RerankUnsupported: the model is not a reranker.
            InvalidRequest: a document with the query does not fit the context.
            RequestCancelled: ``cancelled`` said so before all were scored.
        """
        ...


@runtime_checkable
class TokenCodec(Protocol):
    """A backend whose model's vocabulary can be read token by token."""

    def encode(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """The token ids of ``text``: with the model's own BOS/EOS where ``add_special``, and special
        tokens written in the text read as such where ``parse_special``."""
        ...

    def token_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, special tokens spelled out.

        Raises:
            InvalidRequest: an id is not in the vocabulary.
        """
        ...


__all__ = ["Reranks", "TokenCodec"]
