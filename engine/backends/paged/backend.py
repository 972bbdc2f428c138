"""The paged engine behind the Backend protocol: one engine thread, a queue of chunks per request."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from engine.backends.base import BackendStats, LoadOptions, ModelInfo, ModelSpec
from engine.backends.paged.sampler import RequestSampler
from engine.backends.paged.sequence import Sequence as Seq
from engine.backends.paged.startup import LoadedEngine, start_engine
from engine.backends.paged.streaming import StreamWriter
from engine.backends.runtime import RequestStream
from engine.chat_template import ChatTemplate
from engine.errors import (
    ContextLengthExceeded,
    EmbeddingsUnsupported,
    InvalidRequest,
    ModelLoadError,
    Overloaded,
)
from engine.tools import RenderedChat, parse_stream, render_request
from engine.tools.guidance import matcher_for
from engine.types import ChatMessage, GenerationChunk, GenerationRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RequestState:
    """What a sequence carries for the engine thread: its request's stream and its sampler."""

    stream: RequestStream
    sampler: RequestSampler


class PagedBackend:
    """Hugging Face (safetensors) and GGUF models on Hearth's paged engine, on CUDA or the CPU."""

    name = "paged"

    def __init__(self) -> None:
        self.loaded: LoadedEngine | None = None
        self.spec: ModelSpec | None = None
        self.template: ChatTemplate | None = None
        self._incoming: list[Seq] = []
        self._by_id: dict[str, Seq] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._writer: StreamWriter | None = None
        self._requests = 0
        self._prompt_tokens = 0

    def load(self, model: ModelSpec, options: LoadOptions | None = None) -> None:
        if model.format == "mlx":
            raise ModelLoadError(str(model.path), "the paged engine cannot read MLX-quantized weights.")
        # The engine thread loads the model as well as running it: torch's CPU kernels run on an
        # OpenMP team per calling thread, and once a second thread has its own team the two
        # oversubscribe the cores and every parallel op pays a wake-up (decode steps ~1.5x slower).
        started: list[LoadedEngine | BaseException] = []
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(model, options or LoadOptions(), started, ready), name=f"paged-{model.name}",
            daemon=True,
        )  # fmt: skip
        self._thread.start()
        ready.wait()
        if isinstance(started[0], BaseException):
            self._thread.join()
            self._thread = None
            raise started[0]
        self.loaded = started[0]
        self.spec = model
        ck = self.loaded.checkpoint
        self.template = ChatTemplate(ck.chat_template, bos_token=ck.bos_token, eos_token=ck.eos_token)
        log.info("loaded %s on %s (%s)", model.name, self.loaded.device, self.loaded.dtype)

    def _require(self) -> LoadedEngine:
        if self.loaded is None:
            raise RuntimeError("the paged backend has no model loaded")
        return self.loaded

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
        return tok.encode_prompt(rendered.prompt)

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """Generate for ``request``. Closing the iterator early cancels the generation.

        Raises:
            ContextLengthExceeded: the prompt does not fit the context.
            InvalidRequest: the prompt is empty, the output format cannot be enforced, or a bias is invalid.
            Overloaded: too many requests are waiting.
        """
        le = self._require()
        rendered = self.render_request(request)
        prompt = self.prompt_tokens(request, rendered)
        if not prompt:
            raise InvalidRequest("The prompt is empty; send some text.", param="prompt")
        n_ctx = le.config.max_model_len
        if len(prompt) >= n_ctx:
            raise ContextLengthExceeded(len(prompt), n_ctx)
        tok = le.checkpoint.tokenizer
        n_logits = le.engine.runner.model.args.vocab_size
        sampler = RequestSampler(request.params, vocab_size=n_logits,
                                 eos_ids=sorted(tok.eog_ids), device=le.device,
                                 matcher=matcher_for(rendered, request, tok, n_logits))  # fmt: skip
        stream = RequestStream(request, piece=tok.piece, is_eog=tok.eog_ids.__contains__, prompt_tokens=len(prompt))
        seq = Seq(prompt, request.params, block_size=le.config.block_size, owner=RequestState(stream, sampler))
        with self._cond:
            if self._stopping:
                raise Overloaded("The model is being unloaded; retry the request.", retry_after=1.0)
            waiting = len(self._incoming) + len(le.engine.scheduler.waiting)
            if waiting >= le.config.max_waiting:
                raise Overloaded(f"{waiting} requests are already waiting for this model; retry in a moment.", 2.0)
            self._incoming.append(seq)
            self._by_id[request.request_id] = seq
            self._requests += 1
            self._prompt_tokens += len(prompt)
            self._cond.notify()
        chunks = stream.chunks(lambda: self.cancel(request.request_id))
        return parse_stream(chunks, rendered) if rendered is not None else chunks

    def cancel(self, request_id: str) -> None:
        with self._cond:
            seq = self._by_id.get(request_id)
            if seq is not None:
                seq.cancelled = True
                self._cond.notify()

    def cancel_all(self) -> None:
        with self._cond:
            for seq in self._by_id.values():
                seq.cancelled = True
            self._cond.notify()

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """Raises EmbeddingsUnsupported: the paged engine serves generation only (``info.can_embed`` is False)."""
        raise EmbeddingsUnsupported(self.spec.name if self.spec is not None else "?", self.name)

    def stats(self) -> BackendStats | None:
        if self.loaded is None:
            return None
        with self._cond:
            out = self.loaded.engine.stats(
                waiting=len(self._incoming), requests=self._requests, prompt_tokens=self._prompt_tokens,
                generated_tokens=self._writer.generated_tokens if self._writer is not None else 0,
            )  # fmt: skip
        out.details["device"] = str(self.loaded.device)
        return out

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        if self.loaded is not None:
            self.loaded.engine.runner.kv_caches = []
            self.loaded = None

    # -- the engine thread --------------------------------------------------------------------
    def _run(self, model: ModelSpec, options: LoadOptions, started: list, ready: threading.Event) -> None:
        try:
            loaded = start_engine(model.path, options)
        except BaseException as exc:  # handed to load(), which raises it in the caller's thread
            started.append(exc)
            ready.set()
            return
        started.append(loaded)
        ready.set()
        self._loop(loaded)

    def _loop(self, loaded: LoadedEngine) -> None:
        engine = loaded.engine
        writer = self._writer = StreamWriter(engine, loaded.checkpoint.tokenizer, self._by_id, self._cond)
        while True:
            with self._cond:
                while not self._stopping and not self._incoming and not engine.has_work:
                    self._cond.wait()
                if self._stopping:
                    for seq in [*self._incoming, *engine.scheduler.running, *engine.scheduler.waiting]:
                        writer.finish(seq, "cancelled")
                    self._incoming.clear()
                    return
                for seq in self._incoming:
                    engine.add(seq)
                self._incoming.clear()
                cancelled = [s for s in (*engine.scheduler.running, *engine.scheduler.waiting) if s.cancelled]
            for seq in cancelled:
                writer.finish(seq, "cancelled")
            try:
                for out in engine.step():
                    writer.advance(out)
            except Exception as exc:  # one bad step must not kill the loop: fail the requests in it
                log.exception("engine step failed")
                for seq in [*engine.scheduler.running, *engine.scheduler.waiting]:
                    writer.finish(seq, "error", error=f"Generation failed: {exc}.")
