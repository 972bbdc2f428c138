"""The app factory: ``create_app(settings, manager)`` builds the worker's HTTP API.

All state lives on ``app.state`` (settings, model manager, metrics); nothing is global,
so tests and the worker can build as many apps as they like.
"""

from __future__ import annotations

import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from engine import __version__
from engine.catalog.services import CatalogServices
from engine.pool import ModelManager
from engine.remote.registry import RemoteRegistry
from engine.server import (
    admin_routes,
    anthropic_routes,
    catalog_routes,
    conversation_routes,
    folder_routes,
    llama_routes,
    log_routes,
    ollama_create,
    ollama_models,
    ollama_routes,
    openai_routes,
    other_apps_routes,
    remote_routes,
    rerank_routes,
    responses_routes,
    responses_socket,
    settings_routes,
    tokenize_routes,
)
from engine.server.errors import install_error_handlers
from engine.server.guard import PageCORS, RequestGuard
from engine.server.metrics import ServerMetrics
from engine.server.response_headers import ResponseHeaders
from engine.settings import ServerSettings


def create_app(
    settings: ServerSettings,
    manager: ModelManager,
    catalog: CatalogServices | None = None,
    remotes: RemoteRegistry | None = None,
) -> FastAPI:
    """A new API app serving ``manager``'s models under ``settings`` (the Hub through ``catalog``,
    and the remote providers' models as ``provider/model`` through ``remotes``)."""
    # The OpenAPI document (behind the API key like the rest) is what the fuzz tests generate requests from.
    app = FastAPI(title="Hearth", version=__version__, docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.settings = settings
    app.state.manager = manager
    app.state.metrics = ServerMetrics(manager.stats_by_load)
    app.state.catalog = catalog or CatalogServices(manager.registry)
    app.state.remotes = remotes or RemoteRegistry()
    install_error_handlers(app)
    # Anthropic's model list first: it answers /v1/models only for requests carrying anthropic-version.
    app.include_router(anthropic_routes.models_router)
    app.include_router(openai_routes.router)
    app.include_router(anthropic_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(responses_socket.router)  # WebSocket /v1/responses
    app.include_router(conversation_routes.router)
    app.include_router(ollama_routes.router)
    app.include_router(ollama_models.router)
    app.include_router(ollama_models.root_router)
    app.include_router(ollama_create.router)
    app.include_router(ollama_create.upload_router)
    app.include_router(admin_routes.router)
    app.include_router(settings_routes.router)
    app.include_router(folder_routes.router)
    app.include_router(other_apps_routes.router)
    app.include_router(log_routes.router)
    app.include_router(catalog_routes.router)
    app.include_router(remote_routes.router)
    app.include_router(rerank_routes.router)
    app.include_router(tokenize_routes.router)
    app.include_router(llama_routes.router)
    from engine.server import docs_routes  # /api/docs: document collections

    app.include_router(docs_routes.router)

    # The launch this worker is (its supervisor's mark): a supervisor waiting for its worker's health tells it
    # from another program answering on the same port.
    instance = {"instance": mark} if (mark := os.environ.get("HEARTH_INSTANCE")) else {}

    @app.get("/health")
    async def health(request: Request):
        if not request.app.state.manager.preloaded.is_set():  # llama-server's answer while its model loads
            return JSONResponse({"status": "loading", **instance}, status_code=503)
        return {"status": "ok", "version": __version__, **instance}

    app.add_api_route("/v1/health", health, methods=["GET"], include_in_schema=False)  # llama-server answers both
    # llama-server's other path to the model list, in OpenAI's shape
    app.add_api_route("/models", openai_routes.list_models, methods=["GET"], include_in_schema=False)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics(request: Request):
        return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.add_middleware(PageCORS, settings=settings)  # loopback pages and --cors-origin: the guard's list
    app.add_middleware(RequestGuard, settings=settings)  # before CORS and every route
    app.add_middleware(ResponseHeaders)  # outermost: a refusal names its request's id too
    return app
