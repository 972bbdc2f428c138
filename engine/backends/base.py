"""The Backend protocol every inference backend implements, and helpers they share."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engine.backends.options import LlamaCppOptions, LoadOptions, MLXOptions, PagedOptions
from engine.types import ChatMessage, GenerationChunk, GenerationRequest, ModelFormat, ModelSpec

if TYPE_CHECKING:
    from engine.tools import RenderedChat


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What a loaded model is: the facts the server and the app show."""

    name: str
    backend: str
    n_ctx: int
    n_ctx_train: int
    vocab_size: int
    has_chat_template: bool
    can_embed: bool = False
    architecture: str = ""
    parameters: int | None = None
    path: str = ""
    vision: bool = False  # takes pictures (a projector with a vision encoder is loaded)
    audio: bool = False  # takes sounds
    gpu_share: float = 0.0  # the share of the weights in GPU memory (0 on the CPU, 1 all on a GPU or Apple's unified memory)


@dataclass(frozen=True, slots=True)
class BackendStats:
    """What every backend reports about the engine serving its model (``/api/stats`` shows it).

    Attributes:
        running: Requests generating now.
        waiting: Requests queued for a place.
        slots: Requests the engine generates for at once.
        n_ctx_per_sequence: Most tokens (prompt and answer) one request may hold.
        requests: Requests admitted since the model loaded.
        prompt_tokens: Their prompt tokens.
        generated_tokens: Tokens generated since the model loaded.
        prefix_cache_tokens: Prompt tokens served from a cached prefix instead of computed.
        max_waiting: Most requests queued beyond the slots before new ones are refused (None: not known).
        details: The backend's own figures (blocks, device, load plan, ...).
    """

    running: int
    waiting: int
    slots: int
    n_ctx_per_sequence: int
    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefix_cache_tokens: int = 0
    max_waiting: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The common fields and the backend's own, flat, as the API shows them."""
        return {
            "running": self.running, "waiting": self.waiting, "slots": self.slots,
            "n_ctx_per_sequence": self.n_ctx_per_sequence, "requests": self.requests,
            "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens,
            "prefix_cache_tokens": self.prefix_cache_tokens, "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
            **({"max_waiting": self.max_waiting} if self.max_waiting is not None else {}), **self.details,
        }  # fmt: skip


@runtime_checkable
class Backend(Protocol):
    """An inference backend. Implementations are thread-safe: ``stream`` may be called
    from several threads at once, and ``cancel`` from any thread."""

    name: str

    def load(self, model: ModelSpec, options: LoadOptions | None = None) -> None:
        """Load ``model``. Raises ModelLoadError (naming the path) on failure."""
        ...

    @property
    def info(self) -> ModelInfo:
        """Facts about the loaded model."""
        ...

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """Generate for ``request``; the last chunk carries a finish_reason.

        Raises ContextLengthExceeded before generating when the prompt does not fit.
        """
        ...

    def cancel(self, request_id: str) -> None:
        """Stop the generation of ``request_id`` within one token; unknown ids are ignored."""
        ...

    def cancel_all(self) -> None:
        """Stop every generation (at shutdown); each stream still ends with its final chunk."""
        ...

    def render_request(self, request: GenerationRequest) -> RenderedChat | None:
        """A chat request rendered through the model's template with its tools and thinking switch
        (None for a raw prompt)."""
        ...

    def prompt_tokens(self, request: GenerationRequest, rendered: RenderedChat | None = None) -> list[int]:
        """The token ids the request's prompt (or rendered chat) is computed from."""
        ...

    def embed(
        self, texts: Sequence[str], *, cancelled: Callable[[], bool] | None = None, truncate: bool = False
    ) -> tuple[list[list[float]], int]:
        """Embeddings of ``texts`` and the tokens they took; ``cancelled`` says whether the caller has gone,
        ``truncate`` cuts a text longer than the context to fit instead of refusing it.

        Raises:
            EmbeddingsUnsupported: the backend cannot embed with this model (``info.can_embed`` is False).
            RequestCancelled: ``cancelled`` said so before all were done.
        """
        ...

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """The model's token ids for ``text``."""
        ...

    def document_start(self) -> list[int]:
        """What a raw prompt with no tokens (empty, or only characters the vocabulary drops) is computed from, as
        OpenAI starts an empty prompt from its end-of-text token: the model's beginning-of-sequence token, else
        its end-of-sequence token; [] where it has neither."""
        ...

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text for ``messages`` in the model's chat template."""
        ...

    def stats(self) -> BackendStats | None:
        """Engine statistics (running/waiting requests, cache use, ...); None before a model is loaded."""
        ...

    def close(self) -> None:
        """Free the model and every resource the backend holds."""
        ...


def drain(out, cancel) -> Iterator[GenerationChunk]:
    """Yield a request's chunks from its queue ``out`` until the one with a finish_reason.

    If the consumer stops early (closes the iterator, disconnects), ``cancel()`` is called
    so the engine stops generating for it at once.
    """
    done = False
    try:
        while True:
            chunk = out.get()
            yield chunk
            if chunk.finish_reason is not None:
                done = True
                return
    finally:
        if not done:
            cancel()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` share from their start (the KV a cached prefix can give)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class StopMatcher:
    """Finds stop strings in streamed text without ever emitting a partial match.

    Text that could be the start of a stop string is held back until the next piece
    decides it. ``feed`` returns (text safe to emit, whether a stop string was hit).
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._pending = ""
        self.matched: str | None = None  # the stop string that ended the text, once one has

    def feed(self, text: str) -> tuple[str, bool]:
        if not self.stops:
            return text, False
        buf = self._pending + text
        first = -1
        for s in self.stops:
            i = buf.find(s)
            if i != -1 and (first == -1 or i < first):
                first = i
        if first != -1:
            self._pending = ""
            self.matched = min((s for s in self.stops if buf.find(s) == first), key=len)
            return buf[:first], True
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), 0, -1):
                if buf.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        self._pending = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        """Text held back when the stream ends without a stop string."""
        out, self._pending = self._pending, ""
        return out


class Utf8Decoder:
    """Turns token byte pieces into text, holding back a character whose bytes are still coming; a byte that can
    start or continue none is U+FFFD at once (one stray byte must not hold back the text after it)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


__all__ = [
    "drain", "common_prefix", "Backend", "ModelSpec", "LoadOptions", "LlamaCppOptions", "PagedOptions", "MLXOptions",
    "ModelInfo", "ModelFormat", "StopMatcher", "Utf8Decoder",
]  # fmt: skip
