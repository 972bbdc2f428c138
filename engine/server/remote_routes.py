"""Remote providers at the HTTP edge: ``provider/model`` requests passed through to the provider
(streams relayed event by event; engine.remote.routing.pass_through decides which), and the admin endpoints the app uses to add, list and remove
providers (``/api/remotes``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine.errors import InvalidRequest, ModelNotFound, RemoteError
from engine.remote.client import RemoteModel
from engine.remote.providers import ProviderAccess
from engine.remote.registry import RemoteRegistry
from engine.remote.relay import DONE, relay_events, rewrite
from engine.remote.routing import RemoteTarget
from engine.server.api_models import ProviderInfo, ProviderList, RemoteBody, RemovedAnswer
from engine.server.errors import response_for
from engine.server.targets import remotes_for

router = APIRouter(prefix="/api")


def _registry(request: Request) -> RemoteRegistry:
    return request.app.state.remotes


async def remote_models(request: Request) -> list[RemoteModel]:
    """The models of every provider that answers (none for a forwarded request)."""
    remotes = remotes_for(request)
    return await remotes.models() if remotes is not None else []


async def model_entry(request: Request, target: RemoteTarget) -> dict[str, Any]:
    """``GET /v1/models/provider/model``.

    Raises:
        RemoteError: the provider cannot list its models.
        ModelNotFound: it does not serve that model.
    """
    access, model_id = target.access, target.name
    status = await _registry(request).status(access)
    if status.error is not None:
        raise status.error
    for m in status.models:
        if m.id == model_id:
            return m.to_openai()
    raise ModelNotFound(
        model_id,
        f"The remote provider '{access.name}' does not serve '{model_id}'; run `hearth models` to list its models.",
    )


async def forward(request: Request, target: RemoteTarget, path: str, stream: bool):
    """Send the request's own JSON body to the provider under its model id and answer with what it
    answers (model renamed back to the public ``provider/model``). The client's Authorization is not
    passed on; the provider gets its own key.

    Raises:
        RemoteError: before any byte of the answer (so the status code says what went wrong).
    """
    access, remote_id, public_model = target.access, target.remote_id, target.name
    body = await request.json()
    body["model"] = remote_id
    client = _registry(request).client
    if not stream:
        data = await client.post_json(access, path, body)
        return JSONResponse(rewrite(data, access, public_model))
    response = await client.open_stream(access, path, body)
    return StreamingResponse(
        _events(response, access, public_model),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(response, access: ProviderAccess, public_model: str) -> AsyncIterator[bytes]:
    try:
        async for event in relay_events(response, access, public_model):
            yield event
    except RemoteError as exc:
        # Mid-answer the status line is sent already: the error becomes the stream's last event.
        yield b"data: " + bytes(response_for(exc).body) + b"\n\n"
        yield DONE


# -- admin: the app adds, lists and removes providers through these -----------------------------
@router.get("/remotes", response_model=ProviderList)
async def list_remotes(request: Request, fresh: bool = False) -> dict:
    statuses = await _registry(request).statuses(fresh=fresh)
    return {"providers": [s.to_json() for s in statuses]}


@router.post("/remotes", response_model=ProviderInfo)
async def add_remote(request: Request, body: RemoteBody) -> dict:
    if body.timeout is not None and body.timeout <= 0:
        raise InvalidRequest("'timeout' must be a number of seconds above 0.", param="timeout")
    status = await _registry(request).add(body.name, body.url, api_key=body.api_key or None, timeout=body.timeout)
    return status.to_json()


@router.delete("/remotes/{name}", response_model=RemovedAnswer)
async def remove_remote(request: Request, name: str) -> dict:
    provider = await _registry(request).remove(name)
    return {"removed": provider.name}
