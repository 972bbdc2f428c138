"""A route's JSON answer made off the event loop.

FastAPI turns what a route returns into JSON on the event loop: ``jsonable_encoder`` walks every value in Python,
then ``json.dumps`` writes it. An answer of many values holds every other client meanwhile. Measured against the
worker (2 busy cores): the answer of a chat of 4 choices of 2,000 tokens with 20 top log-probabilities each stopped
every stream (and ``/health``) for 1.1 s; 2,048 embeddings for 0.6 s; ``/completion`` with ``n_probs`` 20 for 0.7 s.

:class:`AnswerRoute` makes the answer (the same JSON, the same status) on a worker thread instead, where the
interpreter lets the event loop run between its steps. A route that returns a :class:`Response` of its own, names a
response model or class, or is not a coroutine (FastAPI runs those on a thread already) is left as it is.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import anyio
from fastapi.datastructures import DefaultPlaceholder
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

__all__ = ["AnswerRoute", "answered_off_loop"]


def _names_model(hint: Any) -> bool:
    """Whether a return annotation names a pydantic model anywhere (FastAPI then filters the answer by it)."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return True
    return any(_names_model(arg) for arg in typing.get_args(hint))


def _plain_answer(endpoint: Callable[..., Any]) -> bool:
    """Whether FastAPI would answer what ``endpoint`` returns with the default JSON response and no model."""
    if not inspect.iscoroutinefunction(endpoint):
        return False
    try:
        hint = typing.get_type_hints(endpoint).get("return")
    except Exception:  # an annotation that does not resolve here: leave the route to FastAPI
        return False
    return not _names_model(hint)


def _json_response(content: Any, status_code: int | None) -> JSONResponse:
    return JSONResponse(jsonable_encoder(content), status_code=status_code or 200)


def answered_off_loop(endpoint: Callable[..., Any], *, status_code: int | None = None) -> Callable[..., Any]:
    """``endpoint`` (a coroutine function), with what it returns made into a JSON response on a worker thread; a
    :class:`Response` it returns is passed through. Its signature stays the one FastAPI reads."""

    @functools.wraps(endpoint)
    async def answer(*args: Any, **kwargs: Any) -> Any:
        result = await endpoint(*args, **kwargs)
        if isinstance(result, Response):
            return result
        return await anyio.to_thread.run_sync(_json_response, result, status_code)

    return answer


class AnswerRoute(APIRoute):
    """A route whose JSON answer is made off the event loop (see the module)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        default_model = isinstance(kwargs.get("response_model", DefaultPlaceholder(None)), DefaultPlaceholder)
        response_class = kwargs.get("response_class", DefaultPlaceholder(JSONResponse))
        default_class = (
            isinstance(response_class, DefaultPlaceholder) and response_class.value is JSONResponse
        )
        if default_model and default_class and _plain_answer(endpoint):
            endpoint = answered_off_loop(endpoint, status_code=kwargs.get("status_code"))
        super().__init__(path, endpoint, **kwargs)
