"""The MLX backend: the fastest path on Apple Silicon, and MLX's CPU build elsewhere.

Loads MLX-quantized folders, plain Hugging Face safetensors folders and llama-family GGUF
files; runs one generation at a time on the model's own thread (requests queue). Requests draft by
prompt lookup (speculative decoding: ``auto``, ``ngram``, an OpenAI ``prediction``); a draft model
is the llama.cpp backend's, so ``draft:MODEL`` drafts as ``auto`` here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from engine.backends.base import LoadOptions, ModelInfo, ModelSpec
from engine.backends.facade import BackendFacade
from engine.backends.mlx import loader
from engine.backends.mlx.runner import GenerationLoop
from engine.backends.mlx.runner import Sequence as Seq
from engine.backends.mlx.sampler import TokenSampler
from engine.backends.runtime import RequestStream, given_tokens, refuse_media
from engine.backends.speculative import SpeculativeOptions
from engine.errors import EmbeddingsUnsupported
from engine.tools import RenderedChat, render_request
from engine.tools.guidance import matcher_for
from engine.tools.thinking_budget import thinking_budget_for
from engine.types import ChatMessage, GenerationChunk, GenerationRequest

log = logging.getLogger(__name__)

DEFAULT_CTX = 4096
# Prompt tokens computed between cancellation checks: MLX's CPU build computes a few dozen
# tokens a second, Metal thousands.
PREFILL_CHUNK_CPU = 64
PREFILL_CHUNK_GPU = 512
DEFAULT_MAX_WAITING = 64

#: Request fields the MLX backend accepts but cannot honour: none. ``response_format`` and forced
#: tool calls are enforced by llguidance (engine.tools.guidance), and every sampling parameter of
#: :class:`~engine.types.SamplingParams` is honoured.
UNSUPPORTED_PARAMS: tuple[str, ...] = ()


def ignored_params(request: GenerationRequest) -> tuple[str, ...]:
    """The fields of ``request`` the MLX backend will ignore (for the server to mention)."""
    return tuple(p for p in UNSUPPORTED_PARAMS if p == "response_format" and request.response_format.type != "text")


class MLXBackend(BackendFacade[GenerationLoop]):
    """Models on MLX: Metal on Apple Silicon, the CPU elsewhere."""

    name = "mlx"
    unsupported_params = UNSUPPORTED_PARAMS

    def __init__(self) -> None:
        super().__init__()
        self._speculative = SpeculativeOptions()

    def load(self, model: ModelSpec, options: LoadOptions | None = None) -> None:
        """Load ``model`` on a new generation thread.

        Raises:
            ModelLoadError: the model cannot be read or run by MLX (the message names its path).
        """
        options = options or LoadOptions()
        self.close()

        def n_ctx(loaded: loader.LoadedModel) -> int:
            return options.n_ctx or min(DEFAULT_CTX, loaded.n_ctx_train or DEFAULT_CTX)

        prefill_chunk = options.mlx.prefill_chunk
        self.loop = GenerationLoop(
            lambda: loader.load(model),
            n_ctx=n_ctx,
            prefill_chunk=prefill_chunk or (PREFILL_CHUNK_CPU if loader.on_cpu() else PREFILL_CHUNK_GPU),
            max_waiting=options.max_waiting if options.max_waiting is not None else DEFAULT_MAX_WAITING,
        )
        self.spec = model
        self._speculative = options.speculative
        log.info("loaded %s on MLX with a context of %d tokens", model.path, self.loop.n_ctx)

    def ignored_params(self, request: GenerationRequest) -> tuple[str, ...]:
        """The fields of ``request`` this backend will not honour (the server can say so)."""
        return ignored_params(request)

    def _require(self) -> tuple[loader.LoadedModel, GenerationLoop]:
        loop = self.loop
        if loop is None or loop.loaded is None:
            raise self.not_loaded()
        return loop.loaded, loop

    def _model_info(self, spec: ModelSpec) -> ModelInfo:
        loaded, loop = self._require()
        return ModelInfo(
            name=spec.name,
            backend=self.name,
            n_ctx=loop.n_ctx,
            n_ctx_train=loaded.n_ctx_train,
            vocab_size=loaded.vocab.n_vocab,
            has_chat_template=not loaded.vocab.chat_template.is_fallback,
            can_embed=False,
            architecture=loaded.architecture,
            parameters=loaded.n_params,
            path=str(loaded.path),
            gpu_share=1.0,  # Apple's unified memory, as Ollama counts it on a Mac
        )

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        loaded, _ = self._require()
        return loaded.vocab.chat_template.render(messages, add_generation_prompt=True)

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        loaded, _ = self._require()
        return loaded.vocab.encode(text, parse_special=special)

    def document_start(self) -> list[int]:
        loaded, _ = self._require()
        return loaded.vocab.document_start()

    def render_request(self, request: GenerationRequest) -> RenderedChat | None:
        """The chat request rendered with its tools and thinking switch (None for a raw prompt)."""
        loaded, _ = self._require()
        if request.messages is None:
            return None
        return render_request(loaded.vocab.chat_template, request, architecture=loaded.architecture)

    def encode(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """``text``'s token ids (``/tokenize``)."""
        return self._require()[0].vocab.encode_text(text, add_special=add_special, parse_special=parse_special)

    def token_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, control tokens spelled out (``/detokenize``).

        Raises:
            InvalidRequest: an id is not in the vocabulary.
        """
        return self._require()[0].vocab.token_bytes(tokens)

    def prompt_tokens(self, request: GenerationRequest, rendered: RenderedChat | None = None) -> list[int]:
        """The token ids the request's prompt (or rendered chat) is computed from."""
        loaded, _ = self._require()
        if request.prompt_ids is not None:
            return given_tokens(request.prompt_ids, loaded.vocab.n_vocab)
        if request.infill is not None:
            vocab = loaded.vocab
            return self._infill_tokens(request, vocab.fim, lambda text: vocab.encode(text, parse_special=False),
                                       vocab.bos_id if vocab.add_bos else None)  # fmt: skip
        if request.prompt is not None:
            return loaded.vocab.encode_prompt(request.prompt)
        rendered = rendered or render_request(loaded.vocab.chat_template, request, architecture=loaded.architecture)
        return loaded.vocab.encode_prompt(rendered.prompt, rendered.literal)

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """Generate for ``request``. Closing the iterator early cancels the generation.

        Raises:
            ContextLengthExceeded: the prompt does not fit this model's context.
            InvalidRequest: the prompt is empty or logit_bias names an unknown token.
            Overloaded: too many requests are waiting.
        """
        refuse_media(request, "images on MLX need mlx-vlm, which is not installed here; serve the model's GGUF "
                     "with its mmproj file through the llama.cpp backend (--backend llamacpp) instead.")
        loaded, loop = self._require()
        vocab = loaded.vocab
        stream, prompt = RequestStream.open(
            self, request, n_ctx=loop.n_ctx, piece=vocab.piece, is_eog=vocab.eog_ids.__contains__,
            speculative=self._speculative,
        )
        ignored = ignored_params(request)
        if ignored:
            log.warning("the mlx backend ignores %s for request %s", ", ".join(ignored), request.request_id)
        matcher = matcher_for(stream.rendered, request, vocab, vocab.n_vocab)
        thinking = thinking_budget_for(stream.rendered, request.params.thinking_budget,
                                       lambda text: vocab.encode(text, parse_special=True), vocab.piece)  # fmt: skip
        seq = Seq(stream=stream, prompt=prompt,
                  sampler=TokenSampler(request.params, vocab.n_vocab, vocab.eog_ids, matcher, thinking))  # fmt: skip
        loop.submit(seq)
        return stream.chunks(lambda: loop.cancel(request.request_id))

    def embed(self, texts: Sequence[str], *, cancelled=None, truncate=False) -> tuple[list[list[float]], int]:
        """Raises EmbeddingsUnsupported: MLX serves generation only (``info.can_embed`` is False)."""
        raise EmbeddingsUnsupported(self.spec.name if self.spec is not None else "?", self.name)


__all__ = ["MLXBackend", "UNSUPPORTED_PARAMS", "ignored_params"]
