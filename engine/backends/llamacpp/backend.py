"""The llama.cpp backend: GGUF models on the CPU (or GPU offload), many requests batched."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence

import psutil

from engine.backends.base import BackendStats, LlamaCppOptions, LoadOptions, ModelInfo, ModelSpec
from engine.backends.facade import BackendFacade
from engine.backends.llamacpp.draft_model import DraftModel
from engine.backends.llamacpp.embedding import Embedder
from engine.backends.llamacpp.load_plan import (
    GGML_KV_TYPES,
    draft_for,
    draft_path,
    llama_gpu_layers,
    plan_llamacpp_load,
)
from engine.backends.llamacpp.media import Projector, literal_rewrites
from engine.backends.llamacpp.model import GGUFModel, check_gguf_file
from engine.backends.llamacpp.overrides import RopeScaling
from engine.backends.llamacpp.ranking import Ranker
from engine.backends.llamacpp.sampler import (
    SequenceSampler,
    grammar_for,
    guide_for,
    strict_call_grammar,
    tool_call_grammar,
)
from engine.backends.llamacpp.scheduler import DecodeLoop
from engine.backends.llamacpp.sequence import Sequence as Seq
from engine.backends.runtime import RequestStream, given_tokens
from engine.backends.speculative import DRAFT, DraftSource, SpeculativeOptions
from engine.backends.speculative_sampling import plain_sampling
from engine.chat_template import ChatTemplateTooCostly
from engine.errors import (
    DraftModelUnusable,
    InvalidRequest,
    ModelLoadError,
    RerankUnsupported,
)
from engine.fit.plan import LoadPlan, prefill_block
from engine.tools import RenderedChat, render_request
from engine.tools.thinking_budget import thinking_budget_for
from engine.types import ChatMessage, GenerationChunk, GenerationRequest

log = logging.getLogger(__name__)

DEFAULT_MAX_WAITING = 64


def default_threads() -> int:
    """Threads for decoding: the physical cores this process may use."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or usable
    return max(1, min(usable, physical))


class LlamaCppBackend(BackendFacade[DecodeLoop]):
    """GGUF models through llama.cpp, with continuous batching and prefix reuse."""

    #: It gives a prompt's own log-probabilities (``SamplingParams.prompt_logprobs``: echo with logprobs).
    scores_prompts = True

    name = "llamacpp"

    def __init__(self) -> None:
        super().__init__()
        self.model: GGUFModel | None = None
        self.plan: LoadPlan | None = None
        self._embedder: Embedder | None = None
        self._ranker: Ranker | None = None
        self.projector: Projector | None = None
        self._n_threads = 1
        self._mask_budget = LlamaCppOptions().grammar_mask_budget
        self._speculative = SpeculativeOptions()
        self.draft: DraftModel | None = None  # --speculative draft:MODEL, when its vocabulary is this model's
        self.draft_refused: str | None = None  # why the draft model named does not draft for this one

    def load(self, model: ModelSpec, options: LoadOptions | None = None) -> None:
        options = options or LoadOptions()
        if model.format != "gguf":
            raise ModelLoadError(str(model.path), "the llama.cpp backend loads only GGUF files.")
        check_gguf_file(model.path)
        # context, slots, KV type and GPU layers that fit, with the projector and the draft model beside the model
        plan = plan_llamacpp_load(model.path, options, mmproj=model.mmproj, draft=draft_for(options))
        self.model = GGUFModel(
            model.path, n_gpu_layers=llama_gpu_layers(plan), tensor_split=plan.tensor_split, chat_template=model.chat_template,
            cpu_moe=plan.cpu_moe or None,  # as asked, or the experts the plan keeps in RAM so every layer fits the GPU
        )
        try:
            self.model.chat_template.check()  # code from the file: one that never finishes is refused here
        except ChatTemplateTooCostly as exc:
            self.model.close()
            self.model = None
            raise ModelLoadError(str(model.path), str(exc)) from exc
        self.spec = model
        self.plan = plan
        n_ctx, n_seq = plan.n_ctx, plan.n_seq
        self._n_threads = options.n_threads or default_threads()
        own = options.llamacpp
        self._mask_budget = own.grammar_mask_budget
        self._speculative = options.speculative
        if model.mmproj is not None:
            try:
                self.projector = Projector(
                    model.mmproj, self.model.model_ptr, n_threads=self._n_threads, use_gpu=plan.gpu_layers > 0
                )
            except ModelLoadError:
                self.model.close()
                self.model = None
                raise
        try:
            self.loop = DecodeLoop(
                self.model,
                n_seq_max=n_seq,
                n_ctx_seq=n_ctx,
                n_threads=self._n_threads,
                adapt_threads=options.n_threads is None,  # a count the user gave is kept as it is
                prefill_chunk=own.prefill_chunk,
                prefill_block=options.n_batch or prefill_block(plan.gpu_layers),
                max_waiting=options.max_waiting if options.max_waiting is not None else max(DEFAULT_MAX_WAITING, n_seq),
                kv_type=GGML_KV_TYPES[plan.kv_type],
                flash_attn=own.flash_attn,
                kv_unified=own.kv_unified,
                rope=RopeScaling(own.rope_scale, own.rope_orig_ctx) if own.rope_scale else None,
                projector=self.projector,
            )
        except MemoryError as exc:
            if self.projector is not None:
                self.projector.close()
                self.projector = None
            self.model.close()
            raise ModelLoadError(str(model.path), f"{exc}; try a smaller context or fewer slots.") from exc
        log.info("loaded %s: %s, %d threads; %s", model.path.name, plan.describe(), self._n_threads, plan.reason)
        if options.speculative.mode == DRAFT:
            self._load_draft(options.speculative, n_seq=n_seq, n_ctx=n_ctx, flash_attn=own.flash_attn)
        self._ranker = Ranker(self.model, self.loop)
        self._embedder = Embedder(self.model, self.loop)

    def _load_draft(self, speculative: SpeculativeOptions, *, n_seq: int, n_ctx: int, flash_attn: bool) -> None:
        """Load the draft model beside this one; one that cannot draft for it is left out, and why is kept."""
        model, loop = self._require()
        path = draft_path(speculative.draft_model or "")
        try:
            self.draft = DraftModel.load(
                path, model, target_name=self.spec.name if self.spec is not None else model.path.name,
                n_gpu_layers=999 if self.plan is not None and self.plan.gpu_layers > 0 else 0,
                n_seq=n_seq, n_ctx_seq=n_ctx, threads=lambda: loop.n_threads, flash_attn=flash_attn,
            )  # fmt: skip
        except (DraftModelUnusable, ModelLoadError, MemoryError) as exc:
            self.draft_refused = str(exc) if isinstance(exc, DraftModelUnusable) else (
                f"The draft model at {path} could not be loaded ({exc}); check --speculative draft:MODEL."
            )  # fmt: skip
            log.warning("%s", self.draft_refused)
            return
        log.info("drafting with %s", path.name)

    def _drafter(
        self, request: GenerationRequest, rendered: RenderedChat | None, prompt: list[int], options: SpeculativeOptions
    ) -> DraftSource | None:
        """A request's drafter from the draft model (None: prompt lookup drafts instead, for a prompt with
        pictures, or where the draft model was refused; a request that asked for drafts gets the reason then).

        Raises:
            DraftModelUnusable: the request asked for drafts and the draft model cannot draft for this model.
        """
        if self.draft is None:
            if request.speculative and self.draft_refused:
                raise DraftModelUnusable(self.draft_refused)
            return None
        if any(t < 0 for t in prompt):  # a picture's placeholders: the draft model cannot see it
            return None
        grammar = request.response_format.type != "text" or (
            rendered is not None and (rendered.constraint is not None or rendered.strict_calls is not None)
        )
        return self.draft.drafter(prompt, options, request.params, plain=plain_sampling(request.params, grammar=grammar))

    def not_loaded(self) -> RuntimeError:
        return RuntimeError("the llama.cpp backend has no model loaded")

    def _require(self) -> tuple[GGUFModel, DecodeLoop]:
        if self.model is None or self.loop is None:
            raise self.not_loaded()
        return self.model, self.loop

    def _model_info(self, spec: ModelSpec) -> ModelInfo:
        model, loop = self._require()
        return ModelInfo(
            name=spec.name,
            backend=self.name,
            n_ctx=loop.n_ctx_seq,
            n_ctx_train=model.n_ctx_train,
            vocab_size=model.n_vocab,
            has_chat_template=not model.chat_template.is_fallback,
            can_embed=True,
            architecture=model.architecture,
            parameters=model.n_params,
            path=str(model.path),
            vision=self.projector is not None and self.projector.vision,
            audio=self.projector is not None and self.projector.audio,
            gpu_share=0.0 if self.plan is None or not self.plan.total_layers
            else min(1.0, self.plan.gpu_layers / self.plan.total_layers),
        )

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        model, _ = self._require()
        return model.chat_template.render(messages, add_generation_prompt=True)

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        model, _ = self._require()
        return model.tokenize(text, add_special=False, parse_special=special)

    def document_start(self) -> list[int]:
        model, _ = self._require()
        start = model.bos_id if model.bos_id >= 0 else model.eos_id
        return [start] if start >= 0 else []

    def render_request(self, request: GenerationRequest) -> RenderedChat | None:
        """The chat request rendered with its tools and thinking switch (None for a raw prompt)."""
        model, _ = self._require()
        if request.messages is None:
            return None
        return render_request(model.chat_template, request, architecture=model.architecture)

    def prompt_tokens(self, request: GenerationRequest, rendered: RenderedChat | None = None) -> list[int]:
        """The token ids the request's prompt (or rendered chat) is decoded from."""
        model, _ = self._require()
        if request.prompt_ids is not None:
            return given_tokens(request.prompt_ids, model.n_vocab)
        if request.infill is not None:
            return self._infill_tokens(request, model.fim, lambda text: model.tokenize(text, parse_special=False),
                                       model.bos_id if model.add_bos and model.bos_id >= 0 else None)  # fmt: skip
        if request.prompt is not None:
            return model.tokenize_prompt(request.prompt)
        rendered = rendered or render_request(model.chat_template, request, architecture=model.architecture)
        media = request.media
        if not media:
            return model.tokenize_prompt(rendered.prompt, rendered.literal)
        name = self._named(request.model, str(model.path))
        if self.projector is None:
            kind = "read images" if media[0].kind == "image" else "hear audio"
            raise InvalidRequest(
                f"Model '{name}' cannot {kind}: it was loaded without a projector (mmproj); send "
                f"{media[0].where or 'the message'} as text, or pair the model with its mmproj file.",
                param=media[0].where,
            )
        self.projector.check(media, name)
        bos = model.bos_id if model.add_bos and model.bos_id >= 0 else None
        rewrites = literal_rewrites(rendered.prompt, rendered.literal, model) if rendered.literal else ()
        prompt = self.projector.tokenize(rendered.prompt, media, bos=bos, rewrites=rewrites)
        _, loop = self._require()
        for m in prompt.media.values():
            if m.non_causal and m.n_tokens > loop.media_batch:  # split over batches, its attention would be wrong
                prompt.close()
                raise InvalidRequest(
                    f"{m.where or 'A picture'} takes {m.n_tokens} tokens, more than this model's batch of "
                    f"{loop.media_batch} that it must be decoded in at once; send a smaller picture.", param=m.where
                )  # fmt: skip
        return prompt

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """Generate for ``request``. Closing the iterator early cancels the generation.

        Raises:
            ContextLengthExceeded: the prompt does not fit this model's context.
            InvalidRequest: the prompt is empty or the output format cannot be enforced.
            Overloaded: too many requests are waiting.
        """
        model, loop = self._require()
        self._refuse_generation(model, request.model)
        # a request's own grammar, read before anything is opened for the request (it may be refused)
        guide = guide_for(model, request.response_format) if request.response_format.type == "grammar" else None
        stream, prompt = RequestStream.open(
            self, request, n_ctx=loop.n_ctx_seq, piece=model.piece, is_eog=model.is_eog, speculative=self._speculative,
            draft=self._drafter,
        )
        rendered = stream.rendered
        # an answer that starts in its thinking: a grammar that holds the whole answer holds it from the thinking's end
        think = rendered.thinking_watch() if rendered is not None else None
        watch, strict = think, False
        if rendered is not None and rendered.constraint is not None:
            grammar, guide = tool_call_grammar(rendered.constraint), None
        elif guide is not None:
            grammar = None
            guide.wait_for(think)
        else:
            grammar = grammar_for(request.response_format)
            if grammar is None and rendered is not None and rendered.strict_calls is not None:
                # a call the model chooses to make follows the strict tools' schemas from its opening on (where
                # they make a grammar: the request asked for no call, so it is not refused for one)
                try:
                    grammar, watch, strict = strict_call_grammar(rendered.strict_calls), rendered.call_watch(), True
                except InvalidRequest as exc:
                    log.info("request %s: a strict tool's call is left free: %s", request.request_id, exc)
        if grammar is None:  # no GBNF to wait (a guide waits for itself)
            watch = None
        try:
            sampler = SequenceSampler(model, request.params, grammar, guide=guide, watch=watch, mask_budget=self._mask_budget,
                                      prompt=prompt, n_ctx=loop.n_ctx_seq)  # fmt: skip
        except InvalidRequest:
            if not strict:
                raise
            log.info("request %s: a strict tool's call is left free: its grammar does not parse", request.request_id)
            sampler = SequenceSampler(model, request.params, None, mask_budget=self._mask_budget, prompt=prompt,
                                      n_ctx=loop.n_ctx_seq)  # fmt: skip
        sampler.thinking = thinking_budget_for(rendered, request.params.thinking_budget, model.tokenize,
                                               lambda t: model.piece(t, special=True))  # fmt: skip
        seq = Seq(stream=stream, prompt=prompt, sampler=sampler, n_ctx=loop.n_ctx_seq)
        try:
            loop.submit(seq)
        except Exception:
            sampler.close()
            raise
        return stream.chunks(lambda: loop.cancel(request.request_id))

    def _refuse_generation(self, model: GGUFModel, asked: str) -> None:
        """An encoder (its attention not causal: BERT and its kin) cannot write text; what it gives instead
        is said, rather than tokens sampled from weights never trained to predict any.

        Raises:
            InvalidRequest: the model is a reranker or an embedding model.
        """
        if model.meta(f"{model.architecture}.attention.causal") != "false":
            return
        name = self._named(asked, model.path.name)
        if self.can_rerank():
            what = "a reranker: it scores documents against a query (POST /v1/rerank)"
        else:
            what = "an embedding model: it turns text into vectors (POST /v1/embeddings)"
        raise InvalidRequest(f"Model '{name}' is {what} and cannot write answers; name a chat model.", param="model")

    def embed(
        self, texts: Sequence[str], *, cancelled: Callable[[], bool] | None = None, truncate: bool = False
    ) -> tuple[list[list[float]], int]:
        """Mean-pooled, L2-normalised embeddings of ``texts`` and the tokens they took.

        They are computed on the decode thread in slices, each between two decode steps, so neither a long
        list nor a long text holds up the requests that are generating (see
        :mod:`engine.backends.llamacpp.embedding`).

        Args:
            texts: The texts.
            cancelled: Whether the caller has gone, asked between two slices.
            truncate: Cut a text longer than the context to fit (its end goes) instead of refusing it.

        Raises:
            ContextLengthExceeded: one text is longer than the context (and ``truncate`` is off).
            RequestCancelled: ``cancelled`` said so.
        """
        self._require()
        if self._embedder is None:
            raise RuntimeError("the llama.cpp backend has no model loaded")
        return self._embedder.embed(texts, cancelled=cancelled, truncate=truncate)

    def can_rerank(self) -> bool:
        """Whether the loaded model is a reranker (see :mod:`engine.backends.llamacpp.ranking`)."""
        return self._ranker is not None and self._ranker.can_rank

    def rerank(
        self, query: str, documents: Sequence[str], *, cancelled: Callable[[], bool] | None = None
    ) -> tuple[list[float], int]:
        """Scores of ``documents`` for ``query`` from a reranker, run on the decode thread in slices.

        Raises:
            RerankUnsupported: the model is not a reranker.
            InvalidRequest: a document with the query is longer than the context.
            RequestCancelled: ``cancelled`` said so between two slices.
        """
        self._require()
        if self._ranker is None or not self._ranker.can_rank:
            raise RerankUnsupported(self.spec.name if self.spec is not None else "?")
        return self._ranker.rerank(query, documents, cancelled=cancelled)

    def encode(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        model, _ = self._require()
        return model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def token_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        model, _ = self._require()
        for t in tokens:
            if not 0 <= t < model.n_vocab:
                raise InvalidRequest(
                    f"Token {t} is not in this model's vocabulary (ids 0 to {model.n_vocab - 1}).", param="tokens"
                )
        return [model.piece(t, special=True) for t in tokens]

    def _add_details(self, stats: BackendStats) -> BackendStats:
        stats.details["load_plan"] = self.plan.to_dict() if self.plan is not None else None
        if self.draft is not None or self.draft_refused is not None:  # --speculative draft:MODEL
            stats.details["draft_model"] = self.draft.model.path.name if self.draft is not None else None
            stats.details["draft_model_seconds"] = round(self.draft.seconds, 3) if self.draft is not None else 0.0
            stats.details["draft_model_refused"] = self.draft_refused
        return stats

    def _close_rest(self) -> None:
        if self.draft is not None:
            self.draft.close()
            self.draft = None
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None
        if self._ranker is not None:
            self._ranker.close()
            self._ranker = None
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        if self.model is not None:
            self.model.close()
            self.model = None
