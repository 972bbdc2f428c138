"""Passing a provider's answers through: its SSE events relayed one by one as they arrive, with the
model named the way the local API's client asked for it (``provider/model``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx

from engine.errors import RemoteStreamCut, RemoteTimeout
from engine.remote.client import transport_reason
from engine.remote.providers import ProviderAccess
from engine.sse import SseParser

DONE = b"data: [DONE]\n\n"


def rewrite(obj: Any, access: ProviderAccess, public_model: str) -> Any:
    """``obj`` (an answer or a chunk) naming ``public_model``, its errors naming the provider."""
    if isinstance(obj, dict):
        if "model" in obj:
            obj["model"] = public_model
        err = obj.get("error")
        if isinstance(err, dict):
            text = str(err.get("message") or "it failed").strip().rstrip(".")
            err["message"] = f"The remote provider '{access.name}' failed while answering: {text}."
    return obj


def _event(payload: str, access: ProviderAccess, public_model: str) -> bytes:
    try:
        obj = json.loads(payload)
    except ValueError:
        return "".join(f"data: {line}\n" for line in payload.split("\n")).encode() + b"\n"  # not JSON: as it came
    obj = rewrite(obj, access, public_model)
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def relay_events(response: httpx.Response, access: ProviderAccess, public_model: str) -> AsyncIterator[bytes]:
    """Yield the provider's events from ``response`` (an open 200 stream), ending with ``[DONE]``.

    Always closes ``response``, also when the consumer stops early (a client that went away), which
    closes the connection to the provider so it stops generating.

    Raises:
        RemoteTimeout: no chunk within the provider's timeout.
        RemoteStreamCut: the provider died or the connection broke before the end of the answer.
    """
    parser = SseParser()
    finished = False
    try:
        try:
            async for part in response.aiter_bytes():
                for payload in parser.feed(part):
                    if payload.strip() == "[DONE]":
                        finished = True
                        yield DONE
                        return
                    yield _event(payload, access, public_model)
        except httpx.TimeoutException:
            raise RemoteTimeout(provider=access.name, url=access.base_url, seconds=access.provider.timeout) from None
        except httpx.RemoteProtocolError:
            raise RemoteStreamCut(provider=access.name, url=access.base_url, reason="the connection closed mid-answer") from None
        except httpx.HTTPError as exc:
            raise RemoteStreamCut(provider=access.name, url=access.base_url, reason=transport_reason(exc)) from None
        for payload in parser.close():
            if payload.strip() == "[DONE]":
                finished = True
                yield DONE
                return
            yield _event(payload, access, public_model)
        if not finished:
            raise RemoteStreamCut(provider=access.name, url=access.base_url, reason="the stream ended without [DONE]")
    finally:
        # Shielded: when the client went away this task is being cancelled, and the connection to
        # the provider must still be closed (that is what stops its generation).
        with anyio.CancelScope(shield=True):
            await response.aclose()


__all__ = ["DONE", "relay_events", "rewrite"]
