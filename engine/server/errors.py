"""The one place engine exceptions become OpenAI-shaped HTTP errors.

Classification is by exception type, never by message text.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import (
    AdminKeyRequired,
    BackendUnavailable,
    ContextLengthExceeded,
    DownloadError,
    HearthError,
    HubAccessDenied,
    HubNotFound,
    HubRateLimited,
    HubUnavailable,
    InsufficientDiskSpace,
    InvalidRequest,
    ModelLoadError,
    ModelNotFound,
    Overloaded,
    ProviderNotFound,
    RemoteAuthFailed,
    RemoteFailed,
    RemoteStreamCut,
    RemoteTimeout,
    RemoteUnreachable,
    SchemaTooComplex,
)
from engine.server.schemas import ErrorResponse

log = logging.getLogger(__name__)

# The errors every endpoint may answer with, for the OpenAPI document (a range also stands in for
# FastAPI's 422: request validation errors are answered with 400 in OpenAI's shape).
ERROR_RESPONSES: dict[int | str, dict] = {
    "4XX": {"model": ErrorResponse, "description": "The request was refused; the message says what to change."},
    "5XX": {"model": ErrorResponse, "description": "The server or a remote provider failed; the message says why."},
}


class GenerationFailed(HearthError):
    """A generation that had started failed in the backend; the message is the backend's own."""


def error_body(message: str, type_: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    status: int, message: str, type_: str, *, param: str | None = None, code: str | None = None, headers=None
) -> JSONResponse:
    return JSONResponse(error_body(message, type_, param=param, code=code), status_code=status, headers=headers)


def response_for(exc: Exception) -> JSONResponse:
    """The HTTP response for an exception raised while serving a request."""
    if isinstance(exc, GenerationFailed):
        log.warning("generation failed: %s", exc)
        return error_response(500, str(exc), "server_error", code="generation_failed")
    if isinstance(exc, ModelNotFound):
        return error_response(404, str(exc), "invalid_request_error", param="model", code="model_not_found")
    if isinstance(exc, ContextLengthExceeded):
        return error_response(400, str(exc), "invalid_request_error", param="messages", code="context_length_exceeded")
    if isinstance(exc, SchemaTooComplex):
        return error_response(400, str(exc), "invalid_request_error", param=exc.param, code="schema_too_complex")
    if isinstance(exc, InvalidRequest):
        return error_response(400, str(exc), "invalid_request_error", param=exc.param, code="invalid_value")
    if isinstance(exc, AdminKeyRequired):
        return error_response(403, str(exc), "permission_error", param=exc.param, code="admin_key_required")
    if isinstance(exc, Overloaded):
        return error_response(
            429, str(exc), "rate_limit_error", code="overloaded", headers={"Retry-After": str(max(1, round(exc.retry_after)))}
        )
    if isinstance(exc, BackendUnavailable):
        return error_response(503, str(exc), "server_error", code="backend_unavailable")
    if isinstance(exc, ModelLoadError):
        return error_response(500, str(exc), "server_error", code="model_load_error")
    if isinstance(exc, HubNotFound):
        return error_response(404, str(exc), "invalid_request_error", code="hub_not_found")
    if isinstance(exc, HubAccessDenied):
        return error_response(403, str(exc), "invalid_request_error", code="hub_access_denied")
    if isinstance(exc, HubRateLimited):
        headers = {"Retry-After": str(max(1, round(exc.retry_after)))}
        return error_response(429, str(exc), "rate_limit_error", code="hub_rate_limited", headers=headers)
    if isinstance(exc, HubUnavailable):
        return error_response(502, str(exc), "server_error", code="hub_unavailable")
    if isinstance(exc, InsufficientDiskSpace):
        return error_response(507, str(exc), "server_error", code="insufficient_storage")
    if isinstance(exc, DownloadError):
        return error_response(400, str(exc), "invalid_request_error", code="download_error")
    if isinstance(exc, RemoteAuthFailed):
        return error_response(401, str(exc), "invalid_request_error", code="remote_auth_failed")
    if isinstance(exc, RemoteUnreachable):
        return error_response(502, str(exc), "server_error", code="remote_unreachable")
    if isinstance(exc, RemoteStreamCut):
        return error_response(502, str(exc), "server_error", code="remote_stream_cut")
    if isinstance(exc, RemoteTimeout):
        return error_response(504, str(exc), "server_error", code="remote_timeout")
    if isinstance(exc, RemoteFailed):
        type_ = exc.type_ or ("invalid_request_error" if exc.status < 500 else "server_error")
        return error_response(exc.status, str(exc), type_, param=exc.param, code=exc.code or "remote_error")
    if isinstance(exc, ProviderNotFound):
        return error_response(404, str(exc), "invalid_request_error", code="provider_not_found")
    if isinstance(exc, HearthError):
        return error_response(400, str(exc), "invalid_request_error")
    log.exception("unexpected error while serving a request", exc_info=exc)
    return error_response(500, f"The server failed unexpectedly ({type(exc).__name__}); see the worker log.", "server_error")


def stream_error_body(exc: Exception) -> dict:
    """The error event of a stream that fails after its first chunk: the body the same failure
    gets as a plain response (the HTTP status was sent with the first chunk)."""
    return json.loads(bytes(response_for(exc).body))


def _describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "The request body is invalid.", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "The request body is not valid JSON; send a JSON object.", None
    msg = first.get("msg", "is invalid")
    where = f"'{param}'" if param else "The request body"
    return f"{where}: {msg}.", param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _describe_validation(exc)
        return error_response(400, message, "invalid_request_error", param=param, code="invalid_value")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = "invalid_request_error" if exc.status_code < 500 else "server_error"
        code = {401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
            exc.status_code
        )
        return error_response(exc.status_code, str(exc.detail), type_, code=code, headers=getattr(exc, "headers", None))

    @app.exception_handler(HearthError)
    async def _hearth(_: Request, exc: HearthError) -> JSONResponse:
        return response_for(exc)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return response_for(exc)
