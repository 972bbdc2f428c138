"""The app factory: ``create_app(settings, manager)`` builds the worker's HTTP API.

All state lives on ``app.state`` (settings, model manager, metrics); nothing is global,
so tests and the worker can build as many apps as they like.
"""

from __future__ import annotations

import hmac
import json

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from engine import __version__
from engine.catalog.services import CatalogServices
from engine.pool import ModelManager
from engine.remote.registry import RemoteRegistry
from engine.server import (
    admin_routes,
    anthropic_routes,
    catalog_routes,
    ollama_models,
    ollama_routes,
    openai_routes,
    remote_routes,
    responses_routes,
)
from engine.server.dialect import error_body_for_path
from engine.server.errors import error_body, install_error_handlers
from engine.server.metrics import ServerMetrics
from engine.settings import ServerSettings

OPEN_PATHS = ("/health",)


class _Guard:
    """Pure-ASGI gate in front of the app: API key check and request body size limit."""

    def __init__(self, app, settings: ServerSettings) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in settings.api_keys)
        self.max_body = settings.max_body_bytes

    async def _reject(self, send, status: int, message: str, type_: str, code: str, headers=(), path: str = "") -> None:
        shaped = error_body_for_path(path, status, message)  # Anthropic's and Ollama's clients read their own shape
        body = json.dumps(shaped if shaped is not None else error_body(message, type_, code=code)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") == "OPTIONS":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        if self.keys and scope["path"] not in OPEN_PATHS:
            auth = headers.get(b"authorization", b"")
            token = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            tokens = [t for t in (token, headers.get(b"x-api-key", b"").strip()) if t]  # x-api-key: Anthropic's SDK
            if not any(hmac.compare_digest(t, k) for t in tokens for k in self.keys):
                return await self._reject(
                    send,
                    401,
                    "Missing or wrong API key; send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
                    "invalid_request_error",
                    "invalid_api_key",
                    headers=[(b"www-authenticate", b"Bearer")],
                    path=scope["path"],
                )
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return await self._reject(
                send, 413, f"The request body is larger than {self.max_body} bytes; send less.", "invalid_request_error", "request_too_large",
                path=scope["path"],
            )
        seen = 0
        limit = self.max_body

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge()
            return message

        try:
            return await self.app(scope, limited_receive, send)
        except _TooLarge:
            return await self._reject(
                send, 413, f"The request body is larger than {limit} bytes; send less.", "invalid_request_error", "request_too_large",
                path=scope["path"],
            )


class _TooLarge(Exception):
    pass


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
    app.state.metrics = ServerMetrics(manager.stats)
    app.state.catalog = catalog or CatalogServices(manager.registry)
    app.state.remotes = remotes or RemoteRegistry()
    app.state.loading = False
    install_error_handlers(app)
    # Anthropic's model list first: it answers /v1/models only for requests carrying anthropic-version.
    app.include_router(anthropic_routes.models_router)
    app.include_router(openai_routes.router)
    app.include_router(anthropic_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(ollama_routes.router)
    app.include_router(ollama_models.router)
    app.include_router(ollama_models.root_router)
    app.include_router(admin_routes.router)
    app.include_router(catalog_routes.router)
    app.include_router(remote_routes.router)
    from engine.server import docs_routes  # /api/docs: document collections

    app.include_router(docs_routes.router)

    @app.get("/health")
    async def health(request: Request):
        if request.app.state.loading:
            return JSONResponse({"status": "loading"}, status_code=503)
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics(request: Request):
        return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "x-api-key", "anthropic-version"],
        )
    app.add_middleware(_Guard, settings=settings)
    return app
