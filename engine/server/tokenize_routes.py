"""llama-server's ``POST /tokenize`` and ``POST /detokenize``, with a ``model`` field (Hearth serves several).

``/tokenize`` takes ``content`` and answers ``{"tokens": [ids]}``, or with ``with_pieces``
``{"tokens": [{"id", "piece"}]}`` where a piece that is not valid UTF-8 on its own (part of a character
split over tokens) is the list of its byte values. ``/detokenize`` takes ``tokens`` and answers
``{"content"}``. Without ``model``, the model used most recently of those loaded answers.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from engine.backends.capabilities import TokenCodec
from engine.errors import InvalidRequest
from engine.remote.routing import is_local
from engine.server import targets
from engine.server.dialect import JsonBodyRoute

router = APIRouter(route_class=JsonBodyRoute)  # llama-server reads any body as JSON

# The longest text /tokenize takes (llama.cpp's tokenizer needs a buffer as long as its output).
MAX_CONTENT_CHARS = 1_000_000


class TokenizeBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    add_special: StrictBool = False
    parse_special: StrictBool = True
    with_pieces: StrictBool = False


class DetokenizeBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    tokens: list[int] = Field(max_length=MAX_CONTENT_CHARS)


async def model_or_default(request: Request, name: str | None) -> str:
    """``name``, or when it is missing the loaded model used most recently (once the models the worker was
    started with have loaded: a request right after start gets the model it was started with).

    Raises:
        InvalidRequest: no name and no model loaded.
    """
    if name:
        return name
    manager = request.app.state.manager
    if not manager.preloaded.is_set():
        await asyncio.to_thread(manager.preloaded.wait)
    loaded = manager.loaded()
    if not loaded:
        raise InvalidRequest("No model is loaded; name one in 'model'.", param="model")
    return max(loaded, key=lambda lm: lm.last_used).model.name


async def acquire_local(request: Request, name: str | None, what: str):
    """The local model ``name`` means (or the default), loaded and held until ``manager.release``.

    Raises:
        ModelNotFound: no such model.
        InvalidRequest: a remote provider's model (``what`` runs only on local models).
    """
    target = await targets.resolve(request, await model_or_default(request, name))
    if not is_local(target):
        raise InvalidRequest(f"{what} runs on local models only; name a local model.", param="model")
    return await asyncio.to_thread(request.app.state.manager.acquire, target.name)


def codec_of(lm) -> TokenCodec:
    if not isinstance(lm.backend, TokenCodec):
        raise InvalidRequest(
            f"Model '{lm.model.name}' runs on the {lm.backend_name} backend, which has no /tokenize; use a GGUF model.",
            param="model",
        )
    return lm.backend


def _piece(data: bytes) -> str | list[int]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


@router.post("/tokenize")
async def tokenize(request: Request, body: TokenizeBody) -> dict:
    manager = request.app.state.manager
    lm = await acquire_local(request, body.model, "Tokenizing")

    def count() -> tuple[list[int], list[bytes] | None]:  # off the event loop: a long text takes a while
        codec = codec_of(lm)
        tokens = codec.encode(body.content, add_special=body.add_special, parse_special=body.parse_special)
        return tokens, codec.token_bytes(tokens) if body.with_pieces else None

    try:
        tokens, pieces = await asyncio.to_thread(count)
    finally:
        manager.release(lm)
    if pieces is None:
        return {"tokens": tokens}
    return {"tokens": [{"id": t, "piece": _piece(p)} for t, p in zip(tokens, pieces, strict=True)]}


@router.post("/detokenize")
async def detokenize(request: Request, body: DetokenizeBody) -> dict:
    manager = request.app.state.manager
    lm = await acquire_local(request, body.model, "Detokenizing")
    try:
        data = b"".join(await asyncio.to_thread(codec_of(lm).token_bytes, body.tokens))
    finally:
        manager.release(lm)
    return {"content": data.decode("utf-8", errors="replace")}


__all__ = ["router", "acquire_local", "codec_of", "model_or_default"]
