"""/api/docs: document collections for the app — add, list, index progress with pause and cancel,
search, and the context (sources with markers) for a chat that has collections attached."""

from __future__ import annotations

import asyncio
import threading

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from engine.documents.errors import CollectionNotFound
from engine.server.api_models import (
    AddBody,
    CollectionDeleted,
    CollectionList,
    ContextBody,
    DocCollection,
    DocsContext,
    ModelBody,
    ProgressAnswer,
    SearchAnswer,
    SearchBody,
    SearchHit,
    SharedBody,
)
from engine.server.errors import error_response

router = APIRouter(prefix="/api/docs")
_lock = threading.Lock()


def service(app):
    """The app's DocumentService, made on first use (embeddings through the worker's model manager)."""
    with _lock:
        svc = getattr(app.state, "documents", None)
        if svc is None:
            from engine.documents import DocumentIndex, DocumentService, ManagerEmbedder

            manager = app.state.manager
            svc = DocumentService(DocumentIndex.default(), lambda model: ManagerEmbedder(manager, model))
            app.state.documents = svc
        return svc


async def _call(request: Request, fn, *args, **kwargs):
    svc = service(request.app)
    try:
        return await asyncio.to_thread(fn, svc, *args, **kwargs)
    except CollectionNotFound as exc:
        return error_response(404, str(exc), "invalid_request_error", param="name", code="collection_not_found")


def _collection(svc, name: str) -> dict:
    info = svc.index.info(name).as_dict()
    progress = svc.progress(name)
    info["progress"] = progress.as_dict() if progress is not None else None
    return info


@router.get("/collections", response_model=CollectionList)
async def list_collections(request: Request):
    return await _call(request, lambda svc: {"collections": [_collection(svc, n) for n in svc.index.names()]})


@router.post("/collections", status_code=202, response_model=DocCollection)
async def add_collection(request: Request, body: AddBody):
    def add(svc):
        info = svc.add(body.name, body.paths, model=body.model, shared=body.shared)
        return _collection(svc, info.name)

    result = await _call(request, add)
    return result if isinstance(result, JSONResponse) else JSONResponse(result, status_code=202)


@router.get("/collections/{name}", response_model=DocCollection)
async def get_collection(request: Request, name: str):
    return await _call(request, _collection, name)


@router.delete("/collections/{name}", response_model=CollectionDeleted)
async def delete_collection(request: Request, name: str):
    def remove(svc):
        svc.remove(name)
        return {"deleted": name}

    return await _call(request, remove)


@router.post("/collections/{name}/index", status_code=202, response_model=DocCollection)
async def reindex(request: Request, name: str):
    def start(svc):
        svc.start(name)
        return _collection(svc, name)

    result = await _call(request, start)
    return result if isinstance(result, JSONResponse) else JSONResponse(result, status_code=202)


@router.post("/collections/{name}/{action}", response_model=ProgressAnswer)
async def control(request: Request, name: str, action: str):
    def act(svc):
        return {"progress": svc.control(name, action).as_dict()}

    return await _call(request, act)


@router.put("/collections/{name}/model", status_code=202, response_model=DocCollection)
async def set_model(request: Request, name: str, body: ModelBody):
    def change(svc):
        svc.set_model(name, body.model)
        return _collection(svc, name)

    result = await _call(request, change)
    return result if isinstance(result, JSONResponse) else JSONResponse(result, status_code=202)


@router.put("/collections/{name}/shared", response_model=DocCollection)
async def set_shared(request: Request, name: str, body: SharedBody):
    """Share a collection with the inference keys (their chats may name it in ``hearth.collections``), or stop."""

    def change(svc):
        svc.set_shared(name, body.shared)
        return _collection(svc, name)

    return await _call(request, change)


@router.post("/search", response_model=SearchAnswer)
async def search(request: Request, body: SearchBody):
    def run(svc):
        hits, modes = svc.search(body.collections, body.query, k=body.k, mode=body.mode)
        return SearchAnswer(hits=[SearchHit.model_validate(h) for h in hits], modes=modes)

    return await _call(request, run)


@router.post("/context", response_model=DocsContext)
async def context(request: Request, body: ContextBody):
    def run(svc):
        return DocsContext.model_validate(svc.context(body.collections, body.question, budget_tokens=body.budget_tokens, k=body.k))

    return await _call(request, run)
