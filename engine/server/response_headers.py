"""The headers every response of the port gets from its request: the request's id, and the context its
``max_tokens`` was lowered to where it was (engine.server.request_caps)."""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.server.request_caps import MAX_TOKENS_CAP_HEADER, noted_cap

_CAP_HEADER = MAX_TOKENS_CAP_HEADER.lower().encode()


class ResponseHeaders:
    """Pure ASGI. Every response names its request's id, ``req_`` and 32 hex digits, in ``x-request-id``
    (OpenAI's header) and ``request-id`` (Anthropic's), where the SDKs read it (``_request_id``,
    ``requestID``); the request log's record carries the same id (Starlette's ``request.state.request_id``). A
    response whose request's ``max_tokens`` was capped names the cap (streamed ones too: their headers go once
    the generation has started)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})  # Starlette's request.state writes here
        rid = f"req_{uuid.uuid4().hex}"
        state["request_id"] = rid
        value = rid.encode()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (b"x-request-id", value), (b"request-id", value)]
                cap = noted_cap(state)
                if cap is not None:
                    headers.append((_CAP_HEADER, str(cap).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


__all__ = ["ResponseHeaders"]
