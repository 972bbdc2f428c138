"""The one place exceptions become OpenAI-shaped HTTP errors: :func:`error_info` says how every answer
reports one (a plain response, a stream's last event, another dialect's error body).

A :class:`HearthError` carries its own status, type, code and param (engine.errors); nothing here
reads an error's message to classify it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import HearthError
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

    status = 500
    type = "server_error"
    code = "generation_failed"


# The codes of the HTTP errors FastAPI and the guard raise, by status.
_HTTP_CODES = {401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def error_body(message: str, type_: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    status: int, message: str, type_: str, *, param: str | None = None, code: str | None = None, headers=None
) -> JSONResponse:
    return JSONResponse(error_body(message, type_, param=param, code=code), status_code=status, headers=headers)


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error as every answer reports it: HTTP status, one sentence, OpenAI's type, code and param."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] | None = None

    def body(self) -> dict:
        """OpenAI's error body."""
        return error_body(self.message, self.type, param=self.param, code=self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


# FastAPI's detail when reading a body failed other than as invalid JSON (json's RecursionError, among others)
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


def error_info(exc: BaseException) -> ErrorInfo:
    """How the API reports ``exc``, raised while serving a request: a :class:`HearthError` by its own
    attributes, a bad body or an HTTP refusal by its status, anything else as an unexpected server error."""
    if isinstance(exc, HearthError):
        if isinstance(exc, GenerationFailed):
            log.warning("generation failed: %s", exc)
        retry = {"Retry-After": str(max(1, round(exc.retry_after)))} if exc.retry_after is not None else None
        return ErrorInfo(exc.status, str(exc), exc.type, exc.code, exc.param, retry)
    if isinstance(exc, RequestValidationError):
        message, param = _describe_validation(exc)
        return ErrorInfo(400, message, code="invalid_value", param=param)
    if isinstance(exc, StarletteHTTPException):
        if exc.status_code == 400 and exc.detail == _FASTAPI_BODY_ERROR:  # json could not read it
            if isinstance(exc.__cause__, ValueError) and "integer string conversion" in str(exc.__cause__):
                return ErrorInfo(400, f"The request body could not be read as JSON: a number in it has more than "
                                      f"{sys.get_int_max_str_digits():,} digits; send a shorter one.", code="invalid_value")  # fmt: skip
            return ErrorInfo(400, "The request body could not be read as JSON (it may nest too deeply); send a flatter "
                                  "JSON object.", code="invalid_value")  # fmt: skip
        type_ = "invalid_request_error" if exc.status_code < 500 else "server_error"
        headers = getattr(exc, "headers", None)
        return ErrorInfo(exc.status_code, str(exc.detail), type_, _HTTP_CODES.get(exc.status_code), headers=headers)
    log.exception("unexpected error while serving a request", exc_info=exc)
    return ErrorInfo(500, f"The server failed unexpectedly ({type(exc).__name__}); see the worker log.", "server_error")


def response_for(exc: BaseException) -> JSONResponse:
    """The HTTP response for an exception raised while serving a request."""
    return error_info(exc).response()


def stream_error_body(exc: BaseException) -> dict:
    """The error event of a stream that fails after its first chunk: the body the same failure
    gets as a plain response (the HTTP status was sent with the first chunk)."""
    return error_info(exc).body()


def _describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "The request body is invalid.", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "The request body is not valid JSON; send a JSON object.", None
    if not loc and first.get("type") in ("model_attributes_type", "dict_type", "model_type"):
        # a JSON list or string, or a body sent as a form's or as text (curl -d without a JSON content type)
        return "The request body must be a JSON object, sent with the header Content-Type: application/json.", None
    union = _union_kinds(errors, loc)
    if union is not None:  # a field of several types, none of which took the value: say which it takes
        param = ".".join(loc[:-1])
        return f"'{param}' must be {union}.", param
    msg = first.get("msg", "is invalid")
    where = f"'{param}'" if param else "The request body"
    return f"{where}: {msg}.", param


# The kinds of value pydantic names a union's members by, in a request's words.
_KINDS = {"float": "a number", "int": "a whole number", "str": "a string", "bool": "a boolean", "list": "a list",
          "dict": "an object", "none": "null"}  # fmt: skip
# The errors that say a value is of another type than a member takes (not that a value of its type is wrong).
_TYPE_ERRORS = frozenset(("float_type", "float_parsing", "int_type", "int_parsing", "int_from_float", "string_type",
                          "bool_type", "bool_parsing", "list_type", "dict_type", "none_required", "model_type",
                          "model_attributes_type"))  # fmt: skip


def _union_kinds(errors: Sequence[Any], loc: list[str]) -> str | None:
    """"a number or a string" where the first error is a union's (its last place a member's kind, as
    ``keep_alive.float``) and every error of that field is one member's; None otherwise."""
    if len(loc) < 2:
        return None
    field = loc[:-1]
    kinds: list[str] = []
    for e in errors:
        where = [str(p) for p in e.get("loc", ()) if p != "body"]
        if where[: len(field)] != field:
            continue
        if len(where) != len(field) + 1:
            return None  # an error inside a member: the first error's own words say more
        tag, kind_of_error = where[-1], e.get("type")
        if kind_of_error not in _TYPE_ERRORS:
            return None  # a value of the member's type, wrong otherwise (too long, out of range): its own words
        model = kind_of_error in ("model_type", "model_attributes_type") and tag[:1].isupper()
        kind = "an object" if model else _KINDS.get(tag.split("[", 1)[0])
        if kind is None:
            return None  # an object's key (logit_bias's), not a member's kind
        if kind not in kinds:
            kinds.append(kind)
    if len(kinds) < 2:
        return None
    return ", ".join(kinds[:-1]) + " or " + kinds[-1]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return response_for(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        from engine.server.dialect import error_body_for_path

        info = error_info(exc)  # no route (404) or no such method (405): in the shape of the path's dialect
        if exc.status_code == 404 and exc.detail == "Not Found":  # no route: OpenAI's words for it
            info = replace(info, message=f"Invalid URL ({request.method} {request.url.path}): Hearth has no such endpoint.")
        elif exc.status_code == 405 and exc.detail == "Method Not Allowed":  # the path is served, not with this method
            allowed = (exc.headers or {}).get("Allow", "")
            info = replace(info, message=f"Invalid method ({request.method} {request.url.path}): this endpoint takes "
                                         f"{allowed or 'other methods'}; send one of those.")  # fmt: skip
        shaped = error_body_for_path(request.url.path, info.status, info.message, request.scope.get("headers") or ())
        return info.response() if shaped is None else JSONResponse(shaped, status_code=info.status, headers=info.headers)

    @app.exception_handler(HearthError)
    async def _hearth(_: Request, exc: HearthError) -> JSONResponse:
        return response_for(exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # answered outside the middleware that names every response's request id (Starlette's outermost layer)
        response = response_for(exc)
        rid = getattr(request.state, "request_id", None)
        if rid is not None:
            response.headers["x-request-id"] = response.headers["request-id"] = rid
        return response
