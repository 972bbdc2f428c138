"""The paged engine behind the Backend protocol: the engine in a process of its own (what ``hearth serve`` and
the worker use) or on a thread of this one (``PagedBackend()``, for code that reaches into the engine)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from engine.backends.base import LoadOptions, ModelInfo, ModelSpec
from engine.backends.facade import BackendFacade
from engine.backends.paged.engine_core import EngineFacts
from engine.backends.paged.engine_loop import EngineLoop
from engine.backends.paged.engine_process import EngineProcess, PendingRequest
from engine.backends.paged.loader import Checkpoint, read_checkpoint
from engine.backends.paged.sampler import RequestSampler, thinking_for
from engine.backends.paged.sequence import Sequence as Seq
from engine.backends.paged.startup import LoadedEngine, start_engine
from engine.backends.runtime import RequestStream, given_tokens, refuse_media
from engine.backends.speculative import DraftSource, SpeculativeOptions
from engine.chat_template import ChatTemplate
from engine.errors import EmbeddingsUnsupported, InvalidRequest, ModelLoadError
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


class PagedBackend(BackendFacade[EngineLoop | EngineProcess]):
    """Hugging Face (safetensors) and GGUF models on Hearth's paged engine, on CUDA or the CPU.

    Its ``loop`` is the engine's loop on a thread of this process (:class:`EngineLoop`) or the queue in front
    of the engine in a process of its own (:class:`EngineProcess`).

    Args:
        process: Run the engine in a process of its own, so that nothing this process does (HTTP, JSON,
            detokenizing hundreds of streams) takes the interpreter from the loop that feeds the GPU. False:
            on a thread of this process, with the engine reachable as ``loaded.engine``.
    """

    name = "paged"

    def __init__(self, *, process: bool = False) -> None:
        super().__init__()
        self.process = process
        self.template: ChatTemplate | None = None
        self.checkpoint: Checkpoint | None = None
        self.facts: EngineFacts | None = None
        self._speculative = SpeculativeOptions()

    def load(self, model: ModelSpec, options: LoadOptions | None = None) -> None:
        if model.format == "mlx":
            raise ModelLoadError(str(model.path), "the paged engine cannot read MLX-quantized weights.")
        options = options or LoadOptions()
        self._speculative = options.speculative
        if self.process:
            ck = read_checkpoint(model.path)
            proc = EngineProcess(model.path, options, ck.tokenizer, name=f"paged-{model.name}")
            self.loop = proc
            self.facts = proc.facts
        else:
            loop = EngineLoop(lambda: start_engine(model.path, options), name=f"paged-{model.name}")
            self.loop = loop
            le = loop.loaded
            ck = le.checkpoint
            args = le.engine.runner.model.args
            self.facts = EngineFacts(
                n_ctx=le.config.max_model_len, n_ctx_train=args.max_position_embeddings, vocab_size=args.vocab_size,
                model_type=args.model_type, num_parameters=le.num_parameters, device=str(le.device),
                dtype=str(le.dtype).removeprefix("torch."), max_num_seqs=le.config.max_num_seqs,
                max_waiting=le.config.max_waiting, load_plan=None,
            )  # fmt: skip
        self.checkpoint = ck
        self.spec = model
        self.template = ChatTemplate(  # an Ollama model's translated template replaces the file's, as on llama.cpp
            model.chat_template or ck.chat_template, bos_token=ck.bos_token, eos_token=ck.eos_token,
            specials=ck.tokenizer.special_texts,
        )
        where = "its own process" if self.process else "a thread"
        log.info("loaded %s on %s (%s), the engine on %s", model.name, self.facts.device, self.facts.dtype, where)

    @property
    def engine_process(self) -> EngineProcess | None:
        """The queue in front of the engine's own process; None before a model is loaded, or when the engine runs
        on a thread of this process."""
        return self.loop if isinstance(self.loop, EngineProcess) else None

    @property
    def loaded(self) -> LoadedEngine | None:
        """The model and its engine on this process's thread; None before a model is loaded, or when the engine
        runs in a process of its own."""
        return self.loop.loaded if isinstance(self.loop, EngineLoop) else None

    def _require_loop(self) -> EngineLoop:
        if not isinstance(self.loop, EngineLoop):
            raise self.not_loaded()
        return self.loop

    def _require(self) -> tuple[Checkpoint, EngineFacts]:
        if self.checkpoint is None or self.facts is None:
            raise self.not_loaded()
        return self.checkpoint, self.facts

    def _loaded_template(self) -> ChatTemplate:
        self._require()
        if self.template is None:
            raise self.not_loaded()
        return self.template

    def _model_info(self, spec: ModelSpec) -> ModelInfo:
        _, facts = self._require()
        return ModelInfo(
            name=spec.name, backend=self.name, n_ctx=facts.n_ctx,
            n_ctx_train=facts.n_ctx_train, vocab_size=facts.vocab_size,
            has_chat_template=not self._loaded_template().is_fallback, architecture=facts.model_type,
            parameters=facts.num_parameters, path=str(spec.path), gpu_share=0.0 if facts.device == "cpu" else 1.0,
        )  # fmt: skip

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        return self._loaded_template().render(messages, add_generation_prompt=True)

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        return self._require()[0].tokenizer.encode(text, parse_special=special)

    def document_start(self) -> list[int]:
        return self._require()[0].tokenizer.document_start()

    def render_request(self, request: GenerationRequest) -> RenderedChat | None:
        """The chat request rendered with its tools and thinking switch (None for a raw prompt)."""
        _, facts = self._require()
        if request.messages is None:
            return None
        return render_request(self._loaded_template(), request, architecture=facts.model_type)

    def encode(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """``text``'s token ids (``/tokenize``)."""
        return self._require()[0].tokenizer.encode_text(text, add_special=add_special, parse_special=parse_special)

    def token_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, control tokens spelled out (``/detokenize``).

        Raises:
            InvalidRequest: an id is not in the vocabulary.
        """
        return self._require()[0].tokenizer.token_bytes(tokens)

    def prompt_tokens(self, request: GenerationRequest, rendered: RenderedChat | None = None) -> list[int]:
        ck, facts = self._require()
        tok = ck.tokenizer
        if request.prompt_ids is not None:
            return given_tokens(request.prompt_ids, tok.n_vocab)
        if request.infill is not None:
            return self._infill_tokens(request, tok.fim, lambda text: tok.encode(text, parse_special=False),
                                       tok.bos_id if tok.add_bos else None)  # fmt: skip
        if request.prompt is not None:
            return tok.encode_prompt(request.prompt)
        rendered = rendered or render_request(self._loaded_template(), request, architecture=facts.model_type)
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
        ck, facts = self._require()
        tok = ck.tokenizer
        stream, prompt = RequestStream.open(
            self, request, n_ctx=facts.n_ctx, piece=tok.piece, is_eog=tok.eog_ids.__contains__,
            speculative=self._speculative,
        )
        if isinstance(self.loop, EngineProcess):
            return self._stream_in_process(self.loop, request, stream, prompt)
        loop = self._require_loop()
        le = loop.loaded
        n_logits = facts.vocab_size
        sampler = RequestSampler(request.params, vocab_size=n_logits,
                                 eos_ids=sorted(tok.eog_ids), device=le.device,
                                 matcher=matcher_for(stream.rendered, request, tok, n_logits),
                                 thinking=thinking_for(stream.rendered, request.params, tok))  # fmt: skip
        owner = RequestState(stream, sampler)
        seq = Seq(prompt, request.params, block_size=le.config.block_size, request_id=request.request_id, owner=owner)
        loop.submit(seq)
        return stream.chunks(lambda: loop.cancel(request.request_id))

    def _stream_in_process(
        self, proc: EngineProcess, request: GenerationRequest, stream: RequestStream, prompt: list[int]
    ) -> Iterator[GenerationChunk]:
        """``request`` handed to the engine's process, with what can be checked here checked first."""
        vocab = self._require()[1].vocab_size
        for token in dict(request.params.logit_bias):
            if not 0 <= token < vocab:
                raise InvalidRequest(f"logit_bias names token {token}, which this model does not have.", "logit_bias")
        rendered = stream.rendered
        if rendered is not None and (rendered.constraint or rendered.strict_calls) or request.response_format.type != "text":
            # a grammar that cannot be built is refused here, as the engine would (the matcher is built again there)
            matcher_for(stream.rendered, request, self._require()[0].tokenizer, vocab)
        drafter, stream.drafter = stream.drafter, None  # it drafts where the engine steps
        proc.add(PendingRequest(stream), prompt, stream.rendered, drafter)
        return stream.chunks(lambda: proc.cancel(request.request_id))

    def embed(self, texts: Sequence[str], *, cancelled=None, truncate=False) -> tuple[list[list[float]], int]:
        """Raises EmbeddingsUnsupported: the paged engine serves generation only (``info.can_embed`` is False)."""
        raise EmbeddingsUnsupported(self.spec.name if self.spec is not None else "?", self.name)


__all__ = ["PagedBackend", "RequestState"]
