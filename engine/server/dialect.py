"""What the other API dialects on the port (Anthropic Messages, OpenAI Responses, Ollama) share.

Each dialect is a translation: its request becomes one :class:`GenerationRequest`, run by chat
completions' own generation (the same model manager, scheduler, cancellation and metrics), and the
chunks are translated back. Errors are classified once, by type, in :mod:`engine.server.errors`;
here they are only reshaped into the dialect's error body.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from engine.errors import Overloaded
from engine.remote.routing import is_local
from engine.server import targets
from engine.server.answers import AnswerRoute
from engine.server.docs_chat import DocumentsAsked, attach
from engine.server.errors import error_info
from engine.server.generation import Generation
from engine.types import GenerationChunk, GenerationRequest, TokenLogprob

ANTHROPIC_PREFIX = "/v1/messages"
#: The first segments of Hearth's own ``/api`` routes (the app's): their errors have OpenAI's shape. Every other
#: ``/api`` path is Ollama's namespace, served or not (``/api/copy``, an endpoint of a newer Ollama), and answers
#: in Ollama's: its clients read ``error`` as the message.
HEARTH_API_SEGMENTS = frozenset(("docs", "downloads", "fit", "folders", "hardware", "hub", "log", "models",
                                 "other-apps", "remotes", "stats", "worker"))  # fmt: skip

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

#: Anthropic's status for a server too busy to take the request (its 429 is an account's rate limit).
ANTHROPIC_OVERLOADED = 529


def anthropic_error(status: int, message: str) -> dict:
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def ollama_error(status: int, message: str) -> dict:
    return {"error": message}


def error_body_for_path(path: str, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> dict | None:
    """The error body of the dialect that owns ``path`` (None: OpenAI's shape); ``headers``, the request's: ``/v1/models``
    is Anthropic's for a request that carries ``anthropic-version`` (the Anthropic SDK's always do)."""
    if path.startswith(ANTHROPIC_PREFIX):
        return anthropic_error(status, message)
    if path.startswith("/v1/models") and any(k == b"anthropic-version" for k, _ in headers):
        return anthropic_error(status, message)
    if (path == "/api" or path.startswith("/api/")) and path[5:].split("/", 1)[0] not in HEARTH_API_SEGMENTS:
        return ollama_error(status, message)
    return None


def _as_json(request: Request) -> Request:
    """The request with its body taken as JSON whatever its content type says (``curl -d`` sends a form's)."""
    headers = [(k, v) for k, v in request.scope.get("headers", ()) if k != b"content-type"]
    return Request({**request.scope, "headers": [*headers, (b"content-type", b"application/json")]}, request.receive)


class JsonBodyRoute(AnswerRoute):
    """A route that reads its body as JSON whatever its content type says, as llama-server reads every body
    (``curl -d`` without a JSON content type sends a form's); its errors are the app's."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def as_json(request: Request) -> Response:
            return await handler(_as_json(request))

        return as_json


def error_route(
    shape: Callable[[int, str], dict], *, json_body: bool = False, overloaded: int | None = None
) -> type[APIRoute]:
    """A route class whose handlers answer every error, bad bodies included, in ``shape`` (and, with ``json_body``,
    read every body as JSON); ``overloaded``: the dialect's status for a full queue, where it is not 429."""

    class ShapedRoute(AnswerRoute):
        def get_route_handler(self):
            handler = super().get_route_handler()

            async def shaped(request: Request) -> Response:
                try:
                    return await handler(_as_json(request) if json_body else request)
                except Exception as exc:  # described by type in engine.server.errors
                    f = error_info(exc)
                    status = overloaded if overloaded is not None and f.code == Overloaded.code else f.status
                    return JSONResponse(shape(status, f.message), status_code=status, headers=f.headers)

            return shaped

    return ShapedRoute


class DialectRun:
    """One generation request of a dialect, run exactly as chat completions runs its own, on the
    local or remote model that ``req.model`` names (``target``: resolved already).

    ``load_seconds`` is how long the model took to load (0 when it was loaded already).
    """

    def __init__(
        self,
        request: Request,
        req: GenerationRequest,
        *,
        target: targets.Target | None = None,
        documents: DocumentsAsked | None = None,
        keep_alive: float | None = None,
    ) -> None:
        self.request = request
        self.req = req
        self.target = target
        self.gen = Generation(request, req.model, [req], target=target, documents=documents, keep_alive=keep_alive)
        self.t0 = time.perf_counter()
        self.load_seconds = 0.0
        self.first_token_at: float | None = None
        self.text_logprobs: list[TokenLogprob] = []  # the answer text's tokens (collect), when the request asked

    async def start(self, *, time_load: bool = False) -> DialectRun:
        """Load the model if needed (timed when ``time_load``) and start generating.

        Raises:
            ModelNotFound, ContextLengthExceeded, InvalidRequest, Overloaded: before anything is sent.
        """
        if self.target is None:
            self.target = self.gen.target = await targets.resolve(self.request, self.req.model)
        if time_load and is_local(self.target):
            await asyncio.to_thread(self.request.app.state.manager.load, self.target.name)
            self.load_seconds = time.perf_counter() - self.t0
        await self.gen.start()
        return self

    async def prompt_tokens(self) -> int:
        """The prompt's length in tokens, counted before the generation reports it."""
        return len(await asyncio.to_thread(self.gen.served.prompt_tokens, self.gen.requests[0]))

    @property
    def model_name(self) -> str:
        return self.gen.served_name

    def with_sources(self, payload: dict) -> dict:
        """``payload`` with a grounded answer's ``hearth`` object (its sources); as it is otherwise."""
        return attach(payload, self.gen.grounding)

    async def chunks(self, *, watch_client: bool = False) -> AsyncIterator[GenerationChunk]:
        """The generation's chunks; a failed generation ends with a chunk whose finish_reason is "error".
        ``watch_client``: cancel it if the client disconnects first (a non-streamed answer)."""
        async for _, chunk in self.gen.chunks(watch_client=watch_client):
            if chunk.token_ids and self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            yield chunk

    async def collect(self) -> tuple[str, str, GenerationChunk]:
        """The whole answer text, the thinking, and the final chunk (which holds the tool calls).

        Raises:
            HearthError: the generation failed (its type sets the status; a server error otherwise).
        """
        parts: list[str] = []
        thoughts: list[str] = []
        final = GenerationChunk(finish_reason="stop")
        async for chunk in self.chunks(watch_client=True):
            if chunk.text and chunk.logprobs:
                self.text_logprobs.extend(chunk.logprobs)
            parts.append(chunk.text)
            thoughts.append(chunk.reasoning)
            if chunk.finish_reason is not None:
                final = chunk
        if final.finish_reason == "error":
            raise self.failure(final)
        return "".join(parts), "".join(thoughts), final

    def failure(self, chunk: GenerationChunk) -> Exception:
        """Why the generation ended with the error ``chunk``, as chat completions classifies it."""
        return self.gen.failure(0, chunk)  # the engine's own error where it raised one

    def failure_message(self, chunk: GenerationChunk) -> tuple[int, str]:
        """The status and message a failed stream reports in its last event."""
        f = error_info(self.failure(chunk))
        return f.status, chunk.error or f.message


async def count_prompt_tokens(request: Request, req: GenerationRequest) -> int:
    """How many tokens ``req``'s prompt takes on its model, rendered as a generation would render it.

    Raises:
        ModelNotFound: no such model. InvalidRequest: a remote model (its provider's tokenizer is not here).
    """
    served = await targets.acquire(request, req.model)
    try:
        return len(await asyncio.to_thread(served.prompt_tokens, served.with_defaults(req)))
    finally:
        served.release()


async def context_of(request: Request, req: GenerationRequest, *, count: bool = True) -> tuple[int | None, int | None]:
    """``req``'s prompt in tokens (when ``count``), rendered as a generation would render it, and the most tokens one
    request may hold on its model; each None on a remote model (its tokenizer and its context are the provider's).

    Raises:
        ModelNotFound: no such model.
    """
    served = await targets.acquire(request, req.model)
    try:
        lm = served.lm
        if lm is None:
            return None, None
        stats = await asyncio.to_thread(lm.backend.stats)
        n_ctx = stats.n_ctx_per_sequence if stats is not None else None
        tokens = len(await asyncio.to_thread(served.prompt_tokens, served.with_defaults(req))) if count else None
        return tokens, n_ctx
    finally:
        served.release()


def prompt_room(n_ctx: int, max_tokens: int | None) -> int:
    """The tokens a prompt cut to fit the context may take: the context less a quarter of it (or ``max_tokens``,
    if less) left for the answer."""
    return n_ctx - max(1, min(max_tokens or n_ctx, n_ctx // 4))


async def without_oldest(request: Request, req: GenerationRequest, n_ctx: int) -> tuple[GenerationRequest, bool]:
    """``req`` with the fewest of its oldest messages left out (the system messages before them kept, the last
    message always) that bring its prompt within :func:`prompt_room`; and whether it fits the context at all (False:
    not even the last message with the system messages does, and that is the request given back)."""
    messages = req.messages or ()
    limit = prompt_room(n_ctx, req.params.max_tokens)

    def cut(i: int) -> GenerationRequest:
        kept = tuple(m for m in messages[:i] if m.role == "system") + tuple(messages[i:])
        return replace(req, messages=kept)

    async def fits(i: int, within: int) -> bool:
        return await count_prompt_tokens(request, cut(i)) <= within

    last = len(messages) - 1
    if not await fits(last, limit):
        return cut(last), await fits(last, n_ctx - 1)
    lo, hi = 1, last  # the fewest messages left out: cut(hi) fits, cut(lo - 1) does not
    while lo < hi:
        mid = (lo + hi) // 2
        if await fits(mid, limit):
            hi = mid
        else:
            lo = mid + 1
    return cut(hi), True


__all__ = [
    "anthropic_error",
    "context_of",
    "ollama_error",
    "error_body_for_path",
    "error_route",
    "JsonBodyRoute",
    "DialectRun",
    "count_prompt_tokens",
    "prompt_room",
    "without_oldest",
]
