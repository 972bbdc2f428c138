"""``POST /v1/rerank`` (and ``/rerank``): documents scored for a query by a GGUF reranker, in the body and
answer llama-server, Jina and Cohere use.

The body: ``model`` (else the loaded model used most recently), ``query``, ``documents`` (texts, or objects
with a ``text``), ``top_n`` (all when left out) and ``return_documents`` (off, as llama-server). The answer:
``results`` best first, each with the document's ``index`` and its ``relevance_score`` (the model's raw
score, as llama-server gives it) and, with ``return_documents``, the ``document`` as ``{"text"}``; and
``usage`` with the tokens scored.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from engine.backends.capabilities import Reranks
from engine.errors import RerankUnsupported
from engine.limits import check_rerank_documents
from engine.server.dialect import JsonBodyRoute
from engine.server.embeddings import for_client
from engine.server.tokenize_routes import acquire_local

router = APIRouter(route_class=JsonBodyRoute)  # llama-server reads any body as JSON


class RerankDocument(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: StrictStr


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    query: StrictStr
    documents: list[StrictStr | RerankDocument] = Field(min_length=1)
    top_n: int | None = Field(None, ge=1)
    return_documents: StrictBool = False

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


async def _rerank(request: Request, body: RerankBody) -> dict[str, Any]:
    texts = body.texts()
    check_rerank_documents(len(texts))
    manager = request.app.state.manager
    lm = await acquire_local(request, body.model, "Reranking")
    try:
        backend = lm.backend
        if not isinstance(backend, Reranks):
            raise RerankUnsupported(lm.model.name)
        # the backend says so too, off the event loop (the first time it reads the file's tensor list)
        scores, n_tokens = await for_client(
            request, lambda cancelled: backend.rerank(body.query, texts, cancelled=cancelled)
        )
    finally:
        manager.release(lm)
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[: body.top_n]
    results = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
        if body.return_documents:
            item["document"] = {"text": texts[i]}
        results.append(item)
    return {
        "model": lm.model.name,
        "object": "list",
        "results": results,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }


@router.post("/v1/rerank")
async def rerank(request: Request, body: RerankBody) -> dict:
    return await _rerank(request, body)


@router.post("/rerank")
async def rerank_unversioned(request: Request, body: RerankBody) -> dict:
    return await _rerank(request, body)


__all__ = ["router", "RerankBody"]
