"""The paged engine behind the Backend protocol: one engine thread, a queue of chunks per request."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from engine.backends.base import BackendStats, LoadOptions, ModelInfo, ModelSpec
from engine.backends.paged.engine_loop import EngineLoop
from engine.backends.paged.sampler import RequestSampler
from engine.backends.paged.sequence import Sequence as Seq
from engine.backends.paged.startup import LoadedEngine, start_engine
from engine.backends.runtime import RequestStream, refuse_media
from engine.backends.speculative import DraftSource, SpeculativeOptions
from engine.chat_template import ChatTemplate
from engine.errors import EmbeddingsUnsupported, ModelLoadError
from engine.tools import RenderedChat, render_request
from engine.tools.guidance import matcher_for
from engine.types import ChatMessage, GenerationChunk, GenerationRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RequestState:
    """What a sequence carries for the engine thread: its request's stream and its sampler."""

    stream: RequestStream
    sampler: RequestSampler

    @property
    def drafter(self) -> DraftSource | None:
        """What the request drafts (speculative decoding), None where it does not."""
        return self.stream.drafter


class PagedBackend:
    """Hugging Face (safetensors) and GGUF models on Hearth's paged engine, on CUDA or the CPU."""

    name = "paged"

    def __init__(self) -> None:
        self.loop: EngineLoop | None = None
        self.spec: ModelSpec | None = None
        self.template: ChatTemplate | None = None
        self._speculative = SpeculativeOptions()

    def load(self, model: ModelSpec, options: LoadOptions | None = None) -> None:
        if model.format == "mlx":
            raise ModelLoadError(str(model.path), "the paged engine cannot read MLX-quantized weights.")
        options = options or LoadOptions()
        self._speculative = options.speculative
        self.loop = EngineLoop(lambda: start_engine(model.path, options), name=f"paged-{model.name}")
        self.spec = model
        ck = self.loop.loaded.checkpoint
        self.template = ChatTemplate(
            ck.chat_template, bos_token=ck.bos_token, eos_token=ck.eos_token, specials=ck.tokenizer.special_texts
        )
        log.info("loaded %s on %s (%s)", model.name, self.loop.loaded.device, self.loop.loaded.dtype)

    @property
    def loaded(self) -> LoadedEngine | None:
        """The model and its engine; None before a model is loaded."""
        return self.loop.loaded if self.loop is not None else None

    def _require_loop(self) -> EngineLoop:
        if self.loop is None:
            raise RuntimeError("the paged backend has no model loaded")
        return self.loop

    def _require(self) -> LoadedEngine:
        return self._require_loop().loaded

    def _loaded_template(self) -> ChatTemplate:
        self._require()
        if self.template is None:
            raise RuntimeError("the paged backend has no model loaded")
        return self.template

    @property
    def info(self) -> ModelInfo:
        le = self._require()
        spec = self.spec
        if spec is None:
            raise RuntimeError("the paged backend has no model loaded")
        args = le.engine.runner.model.args
        return ModelInfo(
            name=spec.name, backend=self.name, n_ctx=le.config.max_model_len,
            n_ctx_train=args.max_position_embeddings, vocab_size=args.vocab_size,
            has_chat_template=not self._loaded_template().is_fallback, architecture=args.model_type,
            parameters=le.num_parameters, path=str(spec.path),
        )  # fmt: skip

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        return self._loaded_template().render(messages, add_generation_prompt=True)

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        return self._require().checkpoint.tokenizer.encode(text, parse_special=special)

    def render_request(self, request: GenerationRequest) -> RenderedChat | None:
        """The chat request rendered with its tools and thinking switch (None for a raw prompt)."""
        le = self._require()
        if request.messages is None:
            return None
        return render_request(self._loaded_template(), request, architecture=le.engine.runner.model.args.model_type)

    def prompt_tokens(self, request: GenerationRequest, rendered: RenderedChat | None = None) -> list[int]:
        le = self._require()
        tok = le.checkpoint.tokenizer
        if request.prompt is not None:
            return tok.encode_prompt(request.prompt)
        architecture = le.engine.runner.model.args.model_type
        rendered = rendered or render_request(self._loaded_template(), request, architecture=architecture)
        return tok.encode_prompt(rendered.prompt, rendered.literal)

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """Generate for ``request``. Closing the iterator early cancels the generation.

        Raises:
            ContextLengthExceeded: the prompt does not fit the context.
            InvalidRequest: the prompt is empty, the output format cannot be enforced, or a bias is invalid.
            Overloaded: too many requests are waiting.
        """
        refuse_media(request, "the paged engine runs text models only; serve the model's GGUF and mmproj with "
                     "the llama.cpp backend (--backend llamacpp) to send pictures.")
        loop = self._require_loop()
        le = loop.loaded
        tok = le.checkpoint.tokenizer
        stream, prompt = RequestStream.open(
            self, request, n_ctx=le.config.max_model_len, piece=tok.piece, is_eog=tok.eog_ids.__contains__,
            speculative=self._speculative,
        )
        n_logits = le.engine.runner.model.args.vocab_size
        sampler = RequestSampler(request.params, vocab_size=n_logits,
                                 eos_ids=sorted(tok.eog_ids), device=le.device,
                                 matcher=matcher_for(stream.rendered, request, tok, n_logits))  # fmt: skip
        owner = RequestState(stream, sampler)
        seq = Seq(prompt, request.params, block_size=le.config.block_size, request_id=request.request_id, owner=owner)
        loop.submit(seq)
        return stream.chunks(lambda: loop.cancel(request.request_id))

    def cancel(self, request_id: str) -> None:
        if self.loop is not None:
            self.loop.cancel(request_id)

    def cancel_all(self) -> None:
        if self.loop is not None:
            self.loop.cancel_all()

    def embed(self, texts: Sequence[str], *, cancelled=None, truncate=False) -> tuple[list[list[float]], int]:
        """Raises EmbeddingsUnsupported: the paged engine serves generation only (``info.can_embed`` is False)."""
        raise EmbeddingsUnsupported(self.spec.name if self.spec is not None else "?", self.name)

    def stats(self) -> BackendStats | None:
        return self.loop.stats() if self.loop is not None else None

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()
            self.loop = None


__all__ = ["PagedBackend", "RequestState"]
