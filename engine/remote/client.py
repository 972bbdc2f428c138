"""Requests to remote providers over httpx (asynchronous, so a slow provider never holds up the
worker's event loop), with every failure turned into one typed, named error."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

from engine import __version__
from engine.errors import RemoteAuthFailed, RemoteError, RemoteFailed, RemoteTimeout, RemoteUnreachable
from engine.remote.providers import ProviderAccess

log = logging.getLogger(__name__)

LIST_TIMEOUT = 3.0  # seconds to list a provider's models: a dead provider must not stall a listing
CONNECT_TIMEOUT = 5.0
# A Hearth worker marks what it forwards; a worker that receives such a request forwards nothing
# further (a provider that is, by mistake, this very worker would otherwise call itself forever).
FORWARDED_HEADER = "X-Hearth-Forwarded"
MAX_ERROR_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class RemoteModel:
    """A model a provider serves. ``id`` is the public ``provider/model`` id."""

    id: str
    provider: str
    remote_id: str
    created: int = 0
    owned_by: str = ""
    context_length: int | None = None

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "object": "model", "created": self.created, "owned_by": self.provider}


def transport_reason(exc: BaseException) -> str:
    """A few words on a transport failure, from the OS error underneath httpx's."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLError):
            return "TLS failed"
        if isinstance(cause, socket.gaierror):
            return "unknown host"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    text = str(exc).strip()
    return text.splitlines()[0][:120] if text else type(exc).__name__


def transport_error(exc: httpx.HTTPError, access: ProviderAccess, seconds: float) -> RemoteError:
    """The typed error for an httpx exception raised while talking to ``access``."""
    if isinstance(exc, httpx.ConnectTimeout):
        reason = f"no connection within {CONNECT_TIMEOUT:g} s"
        return RemoteUnreachable(provider=access.name, url=access.base_url, reason=reason)
    if isinstance(exc, httpx.TimeoutException):
        return RemoteTimeout(provider=access.name, url=access.base_url, seconds=seconds)
    return RemoteUnreachable(provider=access.name, url=access.base_url, reason=transport_reason(exc))


def status_error(status: int, body: bytes, access: ProviderAccess) -> RemoteError:
    """The typed error for an HTTP error answer (status >= 400) from ``access``."""
    if status in (401, 403):
        return RemoteAuthFailed(provider=access.name, url=access.base_url, remote_status=status)
    message, type_, param, code = "", None, None, None
    try:
        data = json.loads(body or b"null")
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        err = err if isinstance(err, dict) else data  # OpenAI's shape, or vLLM's flat one
        message = err.get("message") or err.get("detail") or data.get("detail") or ""
        if isinstance(message, list):  # FastAPI validation details
            message = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in message)
        type_ = err.get("type") if isinstance(err.get("type"), str) else None
        param = err.get("param") if isinstance(err.get("param"), str) else None
        code = err.get("code") if isinstance(err.get("code"), str) else None
    elif body:
        message = body[:300].decode("utf-8", errors="replace").strip()
    return RemoteFailed(
        provider=access.name,
        url=access.base_url,
        status=status if 400 <= status <= 599 else 502,
        message=str(message)[:500] or f"HTTP {status}",
        type_=type_,
        param=param,
        code=code,
    )


class RemoteClient:
    """One connection pool for every provider; each request carries its provider's key and timeout."""

    def __init__(self) -> None:
        self._http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            # A pool belongs to one event loop (the worker has one; the CLI makes one per call).
            self._http = httpx.AsyncClient(
                headers={"User-Agent": f"hearth/{__version__}", FORWARDED_HEADER: "1"},
                follow_redirects=True,
                trust_env=False,
            )
            self._loop = loop
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @staticmethod
    def _timeout(access: ProviderAccess, read: float | None = None) -> httpx.Timeout:
        return httpx.Timeout(read or access.provider.timeout, connect=min(CONNECT_TIMEOUT, read or CONNECT_TIMEOUT))

    async def list_models(self, access: ProviderAccess, *, timeout: float = LIST_TIMEOUT) -> list[RemoteModel]:
        """The provider's models (``GET /models``).

        Raises:
            RemoteError: it cannot be reached, refuses the key, times out or answers with an error.
        """
        seconds = min(timeout, access.provider.timeout)
        try:
            r = await self._client().get(
                f"{access.base_url}/models", headers=access.headers(), timeout=self._timeout(access, seconds)
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, access, seconds) from None
        if r.status_code >= 400:
            raise status_error(r.status_code, r.content[:MAX_ERROR_BYTES], access)
        try:
            entries = r.json().get("data", [])
        except (ValueError, AttributeError):
            raise RemoteFailed(
                provider=access.name, url=access.base_url, status=502, message="its model list is not OpenAI-shaped JSON"
            ) from None
        models = []
        for m in entries if isinstance(entries, list) else []:
            if not isinstance(m, dict) or not isinstance(m.get("id"), str) or not m["id"]:
                continue
            ctx = m.get("max_model_len") or m.get("context_length") or m.get("context_window")
            models.append(
                RemoteModel(
                    id=f"{access.name}/{m['id']}",
                    provider=access.name,
                    remote_id=m["id"],
                    created=int(m.get("created") or 0) if isinstance(m.get("created"), int | float) else 0,
                    owned_by=str(m.get("owned_by") or ""),
                    context_length=int(ctx) if isinstance(ctx, int | float) and ctx > 0 else None,
                )
            )
        return models

    async def post_json(self, access: ProviderAccess, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` and return the JSON answer.

        Raises:
            RemoteError: as :meth:`list_models`.
        """
        seconds = access.provider.timeout
        try:
            r = await self._client().post(
                f"{access.base_url}{path}", json=body, headers=access.headers(), timeout=self._timeout(access)
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, access, seconds) from None
        if r.status_code >= 400:
            raise status_error(r.status_code, r.content[:MAX_ERROR_BYTES], access)
        try:
            data = r.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise RemoteFailed(provider=access.name, url=access.base_url, status=502, message="its answer is not JSON")
        return data

    async def open_stream(self, access: ProviderAccess, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST ``body`` and return the response once its headers arrived with status 200; the caller
        reads its body and must close it.

        Raises:
            RemoteError: as :meth:`list_models`, all before any byte of the answer.
        """
        seconds = access.provider.timeout
        client = self._client()
        request = client.build_request(
            "POST",
            f"{access.base_url}{path}",
            json=body,
            headers={**access.headers(), "Accept": "text/event-stream"},
            timeout=self._timeout(access),
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise transport_error(exc, access, seconds) from None
        if response.status_code >= 400:
            content = b""
            try:
                async for part in response.aiter_bytes():
                    content += part
                    if len(content) >= MAX_ERROR_BYTES:
                        break
            except httpx.HTTPError:
                pass
            finally:
                await response.aclose()
            raise status_error(response.status_code, content, access)
        return response


__all__ = [
    "FORWARDED_HEADER",
    "LIST_TIMEOUT",
    "RemoteClient",
    "RemoteModel",
    "status_error",
    "transport_error",
    "transport_reason",
]
