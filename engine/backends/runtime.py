"""The life of one request, the same in every backend: its chunk queue, UTF-8 decoding of token
pieces, stop strings held back, the end-of-generation and length decisions, timings, the final chunk
and cancellation.

A backend opens each request with :meth:`RequestStream.open` (the chat rendered, the prompt tokenized
and checked against the context), then only schedules its sequences and produces their next tokens;
for each new token it calls :meth:`RequestStream.push`, which streams the text and says whether the
request is over, and it ends a request early (cancelled, failed, unloaded) with
:meth:`RequestStream.finish`. Every stream ends with exactly one chunk that has a finish_reason.
"""

from __future__ import annotations

import codecs
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from engine.backends.base import Backend, StopMatcher, Utf8Decoder
from engine.backends.delivery import ChunkQueue, LoopWaker
from engine.backends.speculative import DRAFT, Drafter, DraftSource, SpeculativeOptions
from engine.errors import ContextLengthExceeded, InvalidRequest
from engine.tools import ChatStreamParser, RenderedChat
from engine.types import FinishReason, GenerationChunk, GenerationRequest, TokenLogprob

__all__ = ["DraftFactory", "RequestStream", "StreamChunks", "given_tokens", "prompt_ids", "refuse_media"]

#: A backend's draft model, for a request: (request, its rendered chat, its prompt's tokens, the options) -> its
#: drafter, or None where the draft model cannot draft for it (prompt lookup then does).
DraftFactory = Callable[[GenerationRequest, RenderedChat | None, list[int], SpeculativeOptions], DraftSource | None]


def refuse_media(request: GenerationRequest, why: str) -> None:
    """Refuse a request with pictures or sounds on a backend that cannot take them, ``why`` saying what to do.

    Raises:
        InvalidRequest: the request has media.
    """
    media = request.media
    if media:
        what = "images" if media[0].kind == "image" else "audio"
        raise InvalidRequest(f"This backend cannot read {what}: {why}", param=media[0].where or "messages")


def given_tokens(ids: tuple[int, ...], n_vocab: int) -> list[int]:
    """A prompt given as token ids, each checked against the vocabulary.

    Raises:
        InvalidRequest: an id is not a token of the model.
    """
    for t in ids:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < n_vocab:
            raise InvalidRequest(f"The prompt holds token id {t!r}, which this model does not have (it has ids 0 to "
                                 f"{n_vocab - 1}).", param="prompt")  # fmt: skip
    return list(ids)


def keeps_plain_answer(speculative: SpeculativeOptions, request: GenerationRequest) -> bool:
    """Whether ``auto`` leaves this request undrafted so that its answer is the plain one to the token.

    A verify step computes its rows as one batch, and a batch rounds unlike a one-row step: at temperature 0 a
    greedy pick can flip where the two best logits are close, and the answers part from there (measured on the
    starter with two threads: 3 of 6 grounded 256-token answers differed from ``off``, at a gap of 0.58 nats). So
    ``auto``, the default, drafts no greedy request that did not ask for drafts (``speculative: true``, an
    OpenAI ``prediction``); ``ngram`` and ``draft:MODEL`` draft them when chosen.
    """
    return speculative.mode == "auto" and request.params.greedy and not (request.speculative or request.prediction)


def _showing(piece: Callable[[int], bytes], backend: Backend, markers: Sequence[str]) -> Callable[[int], bytes]:
    """``piece``, with each of ``markers`` that is one token of the model's written as its text (a control token's
    piece is empty)."""
    shown: dict[int, bytes] = {}
    for text in markers:
        ids = backend.tokenize(text, special=True)
        if len(ids) == 1:
            shown[ids[0]] = text.encode()
    if not shown:
        return piece

    def show(token: int) -> bytes:
        return shown.get(token) or piece(token)

    return show


def prompt_ids(backend: Backend, request: GenerationRequest, rendered: RenderedChat | None = None) -> list[int]:
    """The token ids ``request`` is computed from: its prompt's (``backend.prompt_tokens``), after the earlier
    exchange it continues when it has one (``request.context``, Ollama's: the ids a response gave, kept as they
    are, so the model reads its own earlier answer token for token and the prefix cache holds it). A BOS the
    backend opens every prompt with is left out there: the earlier exchange opened the document already.

    Raises:
        InvalidRequest: an id of ``request.context`` is not in the model's vocabulary.
        ContextLengthExceeded: ``request.context`` alone fills the context (refused before its ids are read).
    """
    if request.context and len(request.context) >= (n_ctx := backend.info.n_ctx):
        raise ContextLengthExceeded(len(request.context), n_ctx, param="context")
    prompt = backend.prompt_tokens(request, rendered)
    if not request.context:
        return prompt
    try:
        earlier = backend.prompt_tokens(GenerationRequest(model=request.model, prompt="", prompt_ids=request.context))
    except InvalidRequest:
        raise InvalidRequest("'context' holds a token id this model does not have; send the context this model's "
                             "last response gave, or leave it out.", param="context") from None  # fmt: skip
    added = backend.prompt_tokens(GenerationRequest(model=request.model, prompt=""))  # the BOS a prompt is given
    if added and prompt[:1] == added[:1] == earlier[:1]:
        prompt = prompt[1:]
    return [*earlier, *prompt]


class RequestStream:
    """What every backend keeps for one request besides its own scheduling state.

    Args:
        request: The request.
        piece: The bytes a token adds to the output (b"" for control tokens).
        is_eog: Whether a token ends the generation (unless the request ignores EOS).
        prompt_tokens: Tokens in the prompt, for the final chunk's usage.
        rendered: The chat as rendered, whose output is parsed (tool calls, reasoning); None for a raw prompt.
        drafter: What speculative decoding drafts for this request (None: no drafts); it sees every token
            of the output as it is pushed.
    """

    __slots__ = (
        "request", "params", "out", "decoder", "stops", "generated", "prompt_tokens", "cached_tokens",
        "finished", "t_submit", "t_first", "rendered", "drafter", "draft_tokens", "accepted_draft_tokens", "_piece",
        "_is_eog", "_held", "prompt_logprobs", "context_prompt", "_shown", "_decoded", "_unshown",
    )  # fmt: skip

    def __init__(
        self,
        request: GenerationRequest,
        *,
        piece: Callable[[int], bytes],
        is_eog: Callable[[int], bool],
        prompt_tokens: int,
        rendered: RenderedChat | None = None,
        drafter: DraftSource | None = None,
    ) -> None:
        self.request = request
        self.params = request.params
        self.out = ChunkQueue()
        self.decoder = Utf8Decoder()
        self.stops = StopMatcher(request.params.stop) if request.params.stop else None
        self.generated: list[int] = []
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = 0
        self.finished = False
        self.t_submit = time.perf_counter()
        self.t_first: float | None = None
        self.rendered = rendered
        self.drafter = drafter
        self.draft_tokens = 0  # drafted tokens the model judged (usage's accepted and rejected prediction tokens)
        self.accepted_draft_tokens = 0  # of them, those that became part of the answer
        self._piece = piece
        self._is_eog = is_eog
        self._held: list[GenerationChunk] | None = None
        # A request with ``return_context``: its prompt's ids.
        self.context_prompt: tuple[int, ...] | None = None
        self._shown = 0  # characters of answer text sent so far
        self._decoded = 0  # characters of answer text decoded so far (sent, or held back as a stop string's start)
        # Tokens' log-probabilities waiting for their text, each with where its text starts in the decoded answer: a
        # token's go out with its first character, so that those of a stop string's tokens never do.
        self._unshown: deque[tuple[int, tuple[TokenLogprob, ...]]] = deque()
        # The prompt's tokens with their log-probabilities, as the backend computes them (for a request that asks):
        # they go out with the first chunk.
        self.prompt_logprobs: list[TokenLogprob] | None = [] if request.params.prompt_logprobs is not None else None

    def _take_prompt_logprobs(self) -> tuple[TokenLogprob, ...]:
        out, self.prompt_logprobs = self.prompt_logprobs, None
        return tuple(out) if out else ()

    @classmethod
    def open(
        cls,
        backend: Backend,
        request: GenerationRequest,
        *,
        n_ctx: int,
        piece: Callable[[int], bytes],
        is_eog: Callable[[int], bool],
        speculative: SpeculativeOptions | None = None,
        draft: DraftFactory | None = None,
    ) -> tuple[RequestStream, list[int]]:
        """A stream for ``request`` and its prompt's tokens: the chat rendered through ``backend``'s template
        (tools, thinking switch) and tokenized, then checked against the context.

        Args:
            backend: The backend that renders and tokenizes the request.
            request: The request.
            n_ctx: Most tokens (prompt and answer) one request may hold.
            piece: The bytes a token adds to the output (b"" for control tokens).
            is_eog: Whether a token ends the generation (unless the request ignores EOS).
            speculative: How the backend's loop drafts (None: it verifies no drafts). The request's
                ``speculative`` and ``prediction`` turn drafting off or on for itself.
            draft: The backend's draft model, used in mode ``draft`` (a request with a ``prediction`` drafts
                from it by prompt lookup instead); without one, ``draft`` drafts as ``auto``.

        Raises:
            InvalidRequest: the prompt is empty.
            ContextLengthExceeded: the prompt does not fit the context.
        """
        if request.params.prompt_logprobs is not None and not getattr(backend, "scores_prompts", False):
            raise InvalidRequest("This model's backend does not give a prompt's log-probabilities (echo with logprobs); "
                                 "run it on llama.cpp (a GGUF model), or leave echo or logprobs out.", param="echo")  # fmt: skip
        rendered = backend.render_request(request)
        prompt = prompt_ids(backend, request, rendered)
        if not prompt and rendered is None:  # a raw prompt with no tokens starts a document, as OpenAI's does
            prompt = backend.document_start()
        if not prompt:
            raise InvalidRequest("The prompt is empty; send some text.", param="prompt")
        if len(prompt) >= n_ctx:
            raise ContextLengthExceeded(len(prompt), n_ctx)
        drafter = None
        if speculative is not None and request.speculative is not False and not keeps_plain_answer(speculative, request):
            if speculative.enabled or request.speculative or request.prediction:
                # what the answer can hold at most: a longer prediction only costs memory
                text = (request.prediction or "")[: 16 * n_ctx]
                predicted = backend.tokenize(text)[:n_ctx] if text else []
                options = speculative if speculative.enabled else SpeculativeOptions(mode="ngram")
                if predicted and options.mode in ("auto", DRAFT):  # the caller's own prediction is drafted from, as OpenAI does
                    options = replace(options, mode="ngram")
                if options.mode == DRAFT and draft is not None:
                    drafter = draft(request, rendered, prompt, options)
                if drafter is None:  # a picture's placeholder ids (negative) are no tokens to draft
                    drafter = Drafter([*predicted, *(t for t in prompt if t >= 0)], options)
        if rendered is not None and rendered.markers:  # its markup shows, even where written with control tokens
            piece = _showing(piece, backend, rendered.markers)
        stream = cls(request, piece=piece, is_eog=is_eog, prompt_tokens=len(prompt), rendered=rendered, drafter=drafter)
        if request.return_context and not request.media:  # a picture's placeholder ids are no tokens to give back
            stream.context_prompt = tuple(prompt)
        if stream.prompt_logprobs is not None and prompt[0] >= 0:  # the first token: nothing before it gives it odds
            first = piece(prompt[0])
            stream.prompt_logprobs.append(TokenLogprob(first.decode("utf-8", errors="replace"), prompt[0], None, tuple(first)))
        return stream, prompt

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def hold(self) -> None:
        """Keep this stream's chunks back until :meth:`release`.

        A loop that samples many streams in one step holds them all while it samples: a consumer woken by its
        chunk would take the interpreter lock at the loop's next call into llama.cpp and keep it for its own
        work (the answer's JSON, the socket), so every stream sampled after it would wait. Released together
        at the end of the step, the consumers do that work while llama.cpp computes the next one. Measured on
        the busy 2-core CI VM with the tiny vision model (median step, five runs): on one thread a step of
        eight streams 4.9-5.4 ms -> 3.7-4.3, of four 2.3-2.8 -> 2.1-2.4; on two threads 4.2 -> 3.5 and
        3.9 -> 3.1.
        """
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Hand over the chunks kept back since :meth:`hold`, in order, and stop keeping them back."""
        held, self._held = self._held, None
        for chunk in held or ():
            self.out.put(chunk)

    def _put(self, chunk: GenerationChunk) -> None:
        if self._held is None:
            self.out.put(chunk)
        else:
            self._held.append(chunk)

    def verifying(self, drafted: int) -> None:
        """The backend judges a draft of ``drafted`` tokens this step (their verdicts come with :meth:`push`)."""
        self.draft_tokens += drafted

    def push(
        self, token: int, *, logprobs: tuple[TokenLogprob, ...] = (), context_full: bool = False, kept_draft: bool = False
    ) -> bool:
        """Stream the next token; returns whether the request is over (its final chunk is then sent).

        Args:
            token: The token the backend sampled.
            logprobs: Its log-probabilities, when the request asked for them.
            context_full: Whether the sequence has no room left for another token.
            kept_draft: Whether it is a drafted token the model agreed with. Only those that reach the
                answer count as accepted: one after a stop string or the end of the answer does not.
        """
        first = self.t_first is None
        if first:
            self.t_first = time.perf_counter()
        params = self.params
        if (self._is_eog(token) and not params.ignore_eos) or token in params.stop_token_ids:
            if logprobs and params.prompt_logprobs is not None:
                # a scored prompt (echo with logprobs) lists the token that ended the answer too, as an
                # evaluation harness reads it: the prompt's tokens, then one more
                # (after those of earlier tokens with no text of their own)
                logprobs = self._shown_logprobs(self._decoded + 1) + logprobs
                self._put(GenerationChunk(logprobs=logprobs, prompt_logprobs=self._take_prompt_logprobs()
                                          if self.prompt_logprobs is not None else ()))  # fmt: skip
            self.finish("stop")
            return True
        self.generated.append(token)
        self.accepted_draft_tokens += kept_draft
        if self.drafter is not None:
            self.drafter.push(token)
        text = self.decoder.feed(self._piece(token))
        if logprobs:
            self._unshown.append((self._decoded, logprobs))
        self._decoded += len(text)
        hit = False
        if self.stops is not None and len(self.generated) > params.min_tokens:  # (none ends it before min_tokens)
            text, hit = self.stops.feed(text)
            if hit:
                text += self._kept_stop()
        self._shown += len(text)
        if self._unshown:
            logprobs = self._shown_logprobs(self._shown)
        # the first token's chunk says how much of the prompt the cache held (Anthropic's message_start gives it)
        self._put(GenerationChunk(text=text, token_ids=(token,), logprobs=logprobs, cached_tokens=self.cached_tokens if first else 0,
                                  prompt_logprobs=self._take_prompt_logprobs() if self.prompt_logprobs is not None else ()))  # fmt: skip
        if hit:
            self.finish("stop")
        elif params.max_tokens is not None and len(self.generated) >= params.max_tokens:
            self.finish("length")
        elif context_full:
            self.finish("length")
        else:
            return False
        return True

    def _kept_stop(self) -> str:
        """The stop string that ended the answer, where the request keeps it at the end (vLLM's
        include_stop_str_in_output); else nothing."""
        return (self.stops.matched or "") if self.params.include_stop and self.stops is not None else ""

    def finish(self, reason: FinishReason, *, error: str | None = None, code: str | None = None) -> None:
        """End the stream with ``reason``: what is held back is flushed unless it was cut short. ``code``: with an
        ``error`` the request itself caused (its schema), that error's code."""
        if self.finished:
            return
        self.finished = True
        if self.drafter is not None:
            self.drafter.close()
        tail = ""
        if reason in ("stop", "length") and error is None:
            tail = self.decoder.flush()
            if self.stops is not None:
                text, hit = self.stops.feed(tail)
                tail = text + (self._kept_stop() if hit else self.stops.flush())
        self._shown += len(tail)
        logprobs: tuple[TokenLogprob, ...] = ()
        if reason in ("stop", "length") and error is None and self._unshown:
            cut = self.stops is not None and self.stops.matched is not None  # else every token is part of the answer
            logprobs = self._shown_logprobs(self._shown if cut else self._decoded + 1)
        end = time.perf_counter()
        n_gen = len(self.generated)
        tps = None
        if self.t_first is not None and n_gen > 1 and end > self.t_first:
            tps = (n_gen - 1) / (end - self.t_first)
        self._put(
            GenerationChunk(
                text=tail,
                logprobs=logprobs,
                finish_reason=reason,
                prompt_tokens=self.prompt_tokens,
                completion_tokens=n_gen,
                cached_tokens=self.cached_tokens,
                time_to_first_token=(self.t_first - self.t_submit) if self.t_first is not None else None,
                tokens_per_second=tps,
                error=error,
                error_code=code if error is not None else None,
                stop_sequence=self.stops.matched if self.stops is not None else None,
                draft_tokens=self.draft_tokens,
                accepted_draft_tokens=self.accepted_draft_tokens,
                prompt_logprobs=self._take_prompt_logprobs() if error is None else (),
                context=self._context() if self.context_prompt is not None and error is None else (),
            )
        )

    def _shown_logprobs(self, shown: int) -> tuple[TokenLogprob, ...]:
        """The log-probabilities of the waiting tokens whose text starts before character ``shown``, taken."""
        out: list[TokenLogprob] = []
        unshown = self._unshown
        while unshown and unshown[0][0] < shown:
            out += unshown.popleft()[1]
        return tuple(out)

    def _context(self) -> tuple[int, ...]:
        """Ollama's ``context``: the prompt's ids and the answer's; after a stop string, the answer's up to the last
        token wholly in the text sent (as Ollama's, made from the prompt and the answer's text)."""
        prompt, answer = self.context_prompt or (), self.generated
        if self.stops is not None and self.stops.matched is not None:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            chars = kept = 0
            for token in answer:
                chars += len(decoder.decode(self._piece(token)))
                if chars > self._shown:
                    break
                kept += 1
            answer = answer[:kept]
        return (*prompt, *answer)

    def chunks(self, cancel: Callable[[], None]) -> StreamChunks:
        """The request's chunks as they come, a rendered chat's parsed into text, reasoning and tool calls;
        closing the iterator early calls ``cancel``."""
        return StreamChunks(self.out, cancel, ChatStreamParser(self.rendered) if self.rendered is not None else None)


class _Reader:
    """What a request's reader keeps: its queue, how to cancel, its parser, and whether the last chunk was read."""

    __slots__ = ("out", "cancel", "parser", "done")

    def __init__(self, out: ChunkQueue, cancel: Callable[[], None], parser: ChatStreamParser | None) -> None:
        self.out = out
        self.cancel = cancel
        self.parser = parser
        self.done = False

    def parsed(self, chunk: GenerationChunk) -> GenerationChunk:
        parser = self.parser
        if parser is not None:
            ending = parser.ending
            chunk = parser.feed(chunk)
            if parser.ending and not ending and chunk.finish_reason is None:
                self.cancel()  # the answer ended (a repeated call): its final chunk comes with the counts
        if chunk.finish_reason is not None:
            self.done = True
        return chunk

    def close(self) -> None:
        if not self.done:
            self.done = True
            self.cancel()


def _read(reader: _Reader) -> Iterator[GenerationChunk]:
    # One generator per stream, holding the reader but not the stream: when the stream is dropped before its
    # last chunk, this generator goes with it at once (no reference cycle to wait for) and cancels.
    try:
        while not reader.done:
            yield reader.parsed(reader.out.get())
    finally:
        reader.close()


class StreamChunks(Iterator[GenerationChunk]):
    """A request's chunks, up to the one with a finish_reason: iterated (blocking), or taken on an event loop
    as they arrive (:meth:`listen`, :meth:`take`), with no thread waiting for them. Iterating it again goes
    on where the last loop stopped; dropping it, or :meth:`close`, before the last chunk cancels the generation.

    Args:
        out: The request's chunk queue.
        cancel: Stops the generation; called when the reader leaves before the last chunk.
        parser: Splits a rendered chat's output into text, reasoning and tool calls (None: as it comes).
    """

    __slots__ = ("_reader", "_chunks")

    def __init__(self, out: ChunkQueue, cancel: Callable[[], None], parser: ChatStreamParser | None) -> None:
        self._reader = _Reader(out, cancel, parser)
        self._chunks = _read(self._reader)

    @property
    def done(self) -> bool:
        """Whether the last chunk was read (or the reader left)."""
        return self._reader.done

    @done.setter
    def done(self, value: bool) -> None:
        self._reader.done = value

    def __iter__(self) -> Iterator[GenerationChunk]:
        return self._chunks

    def __next__(self) -> GenerationChunk:
        return next(self._chunks)

    def listen(self, waker: LoopWaker, callback: Callable[[], None]) -> None:
        """Run ``callback`` on ``waker``'s loop when chunks are ready to :meth:`take`."""
        self._reader.out.listen(waker, callback)

    def take(self) -> list[GenerationChunk]:
        """The chunks ready now, without waiting (none past the final one)."""
        reader = self._reader
        out = []
        for chunk in reader.out.take():
            if reader.done:
                break
            out.append(reader.parsed(chunk))
        return out

    def close(self) -> None:
        """Stop reading: the generation is cancelled unless its final chunk was read."""
        self._reader.close()
