"""The generation core every dialect runs: one request's choices on a local model or a remote provider's,
from acquiring the model (with its defaults and a grounded chat's documents) to the chunks, with the metrics
and the request log written as they arrive. Each dialect translates its request into
:class:`GenerationRequest` items before, and the chunks into its own shapes after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import TYPE_CHECKING

from fastapi import Request
from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

from engine import __version__
from engine.errors import ContextLengthExceeded, HearthError, InvalidRequest, SchemaTooComplex
from engine.server import docs_chat, ollama_load, request_caps, targets
from engine.server.access import holds_admin
from engine.server.errors import GenerationFailed
from engine.server.request_log import finished_record
from engine.server.streaming import close_quietly, merge_streams, open_streams
from engine.types import GenerationChunk, GenerationRequest

if TYPE_CHECKING:
    from engine.pool import LoadedModel
    from engine.server.targets import Served, Target

# How often a non-streamed generation checks that its client is still connected.
CLIENT_POLL_SECONDS = 0.25


def prompt_param(path: str) -> str:
    """The body field that holds the prompt at ``path``: what a too-long prompt's error names as its ``param``."""
    if path.endswith("/responses"):
        return "input"
    if path.endswith(("/api/generate", "/completion", "/infill")) or (path.endswith("/completions") and not path.endswith("/chat/completions")):
        return "prompt"
    return "messages"


def format_param(path: str) -> str:
    """The body field that asks for structured output at ``path``: what a schema's error names as its ``param``
    (the engine names chat completions' ``response_format``)."""
    if path.endswith("/responses"):
        return "text.format"
    if path.startswith("/api/"):
        return "format"
    return "response_format"


def _overflow_words(path: str, exc: ContextLengthExceeded) -> str | None:
    """A too-long prompt's message in the words the path's clients read (None: Hearth's own): Anthropic's, which
    Claude Code matches to compact a conversation; OpenAI's on chat and text completions, which LiteLLM matches to
    raise its ContextWindowExceededError (what its context-window fallbacks catch)."""
    if path.startswith("/v1/messages"):
        return (f"prompt is too long: {exc.prompt_tokens} tokens > {exc.n_ctx} maximum; shorten the conversation or load "
                "the model with a larger context (hearth serve --ctx N).")  # fmt: skip
    if path.endswith("/completions"):
        what = "prompt" if prompt_param(path) == "prompt" else "messages"
        return (f"This model's maximum context length is {exc.n_ctx} tokens. However, your {what} resulted in "
                f"{exc.prompt_tokens} tokens; shorten the {'prompt' if what == 'prompt' else 'conversation'} or load the "
                "model with a larger context (hearth serve --ctx N).")  # fmt: skip
    return None


class Generation:
    """One request's choices, running on a local model or a remote provider's (``target``, resolved
    already, or resolved from ``model_name`` at the start), with metrics recorded as chunks arrive."""

    def __init__(
        self,
        request: Request,
        model_name: str,
        requests: list[GenerationRequest],
        *,
        target: Target | None = None,
        documents: docs_chat.DocumentsAsked | None = None,
        keep_alive: float | None = None,
        n: int = 1,
    ) -> None:
        self.http = request
        self.n = n  # choices of each prompt: at most the local model's slots
        self.keep_alive = keep_alive  # seconds the model stays loaded after this request (-1: never; None: as it is)
        self.app = request.app
        self.model_name = model_name
        self.requests = requests
        self.target = target
        self.created = int(time.time())
        self._served: Served | None = None
        self.streams: list[Iterator[GenerationChunk]] = []
        self.failures: dict[int, BaseException] = {}
        self.reasoning: dict[int, str] = {}  # per choice: the thinking collected (engine.tools)
        self.documents = documents  # the collections the prompt is grounded in (engine.server.docs_chat)
        self.grounding: docs_chat.Grounding | None = None
        self.t0 = time.perf_counter()
        self._read = False  # chunks() has begun: it ends the generation (and releases the model) however it ends

    async def start(self) -> None:
        admin = holds_admin(self.http.scope)  # without the admin key: shared collections, files by name
        documents = self.documents
        if documents is not None:  # an unknown collection is refused before a model loads for it
            await asyncio.to_thread(lambda: docs_chat.check(self.app, self.requests, documents, admin=admin))
        served = await targets.acquire(self.http, self.model_name, self.target)
        self._served = served
        if self.keep_alive is not None and served.lm is not None:  # from now: held while it answers, then timed
            try:
                ollama_load.check_model_keep_alive(self.http, served.lm.model.name, self.keep_alive)
            except BaseException:
                served.release()
                raise
            self.app.state.manager.set_keep_alive(served.lm, self.keep_alive)
        # Every dialect's request passes here: the model's own defaults fill what the client left unset.
        self.requests = [served.with_defaults(r) for r in self.requests]
        try:
            if served.lm is not None:
                self._fit_model(served.lm)
            if documents is not None:  # retrieved once the model is known: the context must fit it
                grounded = await asyncio.to_thread(
                    lambda: docs_chat.ground(self.app, served, self.requests, documents, admin=admin)
                )
                self.requests, self.grounding = grounded
            self.streams = await open_streams(served, self.requests)
        except ContextLengthExceeded as exc:
            served.release()
            raise ContextLengthExceeded(exc.prompt_tokens, exc.n_ctx, param=prompt_param(self.http.url.path),
                                        message=_overflow_words(self.http.url.path, exc)) from None  # fmt: skip
        except InvalidRequest as exc:
            served.release()
            if exc.param == "response_format":
                exc.param = format_param(self.http.url.path)
            raise
        except BaseException:
            served.release()
            raise
        self.app.state.metrics.request_started()

    def _fit_model(self, lm: LoadedModel) -> None:
        """Hold the request to what the local model ``lm`` serves without stalling others: ``n`` within its
        slots, ``max_tokens`` within its context (engine.server.request_caps).

        Raises:
            InvalidRequest: ``n`` is over the model's slots.
        """
        stats = lm.backend.stats()
        if stats is not None:
            request_caps.check_choices(self.n, slots=stats.slots, model=self.served_name)
            request_caps.check_sequences(len(self.requests), slots=stats.slots, max_waiting=stats.max_waiting,
                                         model=self.served_name, param=prompt_param(self.http.url.path))  # fmt: skip
        self.requests = request_caps.cap_max_tokens(self.http, self.requests, lm.backend.info.n_ctx)
        self.requests = request_caps.default_thinking_budget(self.requests, self.app.state.settings.reasoning_budget)

    @property
    def served(self) -> Served:
        """The model serving this generation, once ``start`` acquired it."""
        if self._served is None:
            raise RuntimeError("the generation has not started")
        return self._served

    @property
    def lm(self) -> LoadedModel | None:
        """The pool's entry of a local model (None for a remote one)."""
        return self.served.lm

    @property
    def served_name(self) -> str:
        return self.served.name

    @property
    def fingerprint(self) -> str:
        return f"fp_hearth_{__version__}_{self.served.backend_name}"

    def failure(self, index: int, chunk: GenerationChunk) -> HearthError:
        """What made choice ``index`` end with the error ``chunk``: the engine's own error where it
        raised one (its type sets the status), else the backend's message as a generation failure."""
        exc = self.failures.get(index)
        if isinstance(exc, HearthError):
            return exc
        if chunk.error and chunk.error_code == SchemaTooComplex.code:  # the request's schema: a 400
            return SchemaTooComplex(chunk.error)
        if chunk.error and chunk.error_code == InvalidRequest.code:
            return InvalidRequest(chunk.error)
        return GenerationFailed(chunk.error or "Generation failed; see the worker log.")

    async def _cancel_when_client_leaves(self) -> None:
        """Cancel every choice once the client has gone: a non-streamed answer nobody waits for
        must not hold its slot until ``max_tokens``. (A streamed response notices by itself.)"""
        while not await self.http.is_disconnected():
            await asyncio.sleep(CLIENT_POLL_SECONDS)
        for req in self.requests:
            self.served.cancel(req.request_id)

    def abandon(self) -> None:
        """Give up a started generation whose chunks were never read (a background response cancelled before it
        began): cancel its requests and release the model, as reading them to their end would. Once :meth:`chunks`
        has begun, it does this itself."""
        served = self._served
        if self._read or served is None:
            return
        self._read = True
        for req in self.requests:
            served.cancel(req.request_id)
        for it in self.streams:
            close_quietly(it)
        self.app.state.metrics.request_finished("cancelled")
        served.release()

    async def chunks(self, *, watch_client: bool = False) -> AsyncGenerator[tuple[int, GenerationChunk]]:
        """The choices' chunks as they arrive. ``watch_client`` (for a non-streamed answer, whose
        HTTP response is not being written yet) cancels the generation when the client disconnects."""
        self._read = True
        metrics = self.app.state.metrics
        last_token_at: dict[int, float] = {}
        status = "ok"
        first_token_at: float | None = None
        tokens = [0, 0]  # prompt, generated: for the live request log
        watcher = asyncio.create_task(self._cancel_when_client_leaves()) if watch_client else None
        try:
            interval = self.app.state.settings.stream_interval_ms / 1000
            async for index, chunk in merge_streams(self.served, self.requests, self.streams, self.failures, interval):
                now = time.perf_counter()
                if chunk.token_ids:
                    prev = last_token_at.get(index)
                    if prev is None:
                        metrics.observe_ttft(now - self.t0)
                        first_token_at = first_token_at or now
                    else:  # several tokens when the reader fell behind (engine.server.streaming.coalesce)
                        n_new = len(chunk.token_ids)
                        for _ in range(n_new):
                            metrics.observe_itl((now - prev) / n_new)
                    last_token_at[index] = now
                if chunk.finish_reason is not None:
                    metrics.count_tokens(chunk.prompt_tokens if index == 0 else 0, chunk.completion_tokens)
                    tokens[0] += chunk.prompt_tokens if index == 0 else 0
                    tokens[1] += chunk.completion_tokens
                    if chunk.finish_reason == "error":
                        status = "error"
                yield index, chunk
        except BaseException:
            status = "cancelled"
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
            metrics.request_finished(status)
            metrics.request_log.publish(
                finished_record(
                    model=self.served_name, path=self.http.url.path, status=status, t0=self.t0,
                    first_token_at=first_token_at, prompt_tokens=tokens[0], completion_tokens=tokens[1],
                    request_id=getattr(self.http.state, "request_id", ""),
                )
            )  # fmt: skip
            self.served.release()


#: The headers of a streamed answer: not cached, not held back by a proxy.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def streamed(gen: Generation, body: AsyncIterator[bytes], media_type: str = "text/event-stream") -> StreamingResponse:
    """``gen``'s answer streamed as ``body``. However the response ends, its client gone before the body's first
    byte included (the body then never runs, nor its ``finally``), a generation whose chunks were never read is
    given up (:meth:`Generation.abandon`): its sequences cancelled and the model released. Chunks that were read
    end the generation themselves."""
    return _GenerationStream(gen, body, media_type)


class _GenerationStream(StreamingResponse):
    """A streamed answer that gives its generation up once the response ends, if its chunks were never read: when
    the body's streaming ends however it ends, and, should it never have begun (cancelled at once), after it."""

    def __init__(self, gen: Generation, body: AsyncIterator[bytes], media_type: str) -> None:
        super().__init__(body, media_type=media_type, background=BackgroundTask(gen.abandon),
                         headers=STREAM_HEADERS if media_type == "text/event-stream" else None)  # fmt: skip
        self.gen = gen

    async def stream_response(self, send) -> None:
        try:
            await super().stream_response(send)
        finally:
            self.gen.abandon()


__all__ = ["CLIENT_POLL_SECONDS", "STREAM_HEADERS", "Generation", "streamed"]
