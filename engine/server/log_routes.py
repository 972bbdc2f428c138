"""``GET /api/log/stream``: each generation request as it finishes, as server-sent events (admin key).

The stream opens with a ``: subscribed`` comment (records from then on reach this reader), then sends one
``data:`` event per finished request: the fields of :class:`engine.server.request_log.RequestRecord`,
``"type": "request"``, and ``dropped``, how many records this reader missed since the last one it got
(it read too slowly: its queue was full). A comment every few seconds keeps idle connections open and notices readers that left.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

router = APIRouter(prefix="/api")

KEEPALIVE_SECONDS = 10.0


# Out of /openapi.json: a stream that never ends is no operation a schema fuzzer (or client generator) can call.
@router.get("/log/stream", include_in_schema=False)
async def log_stream(request: Request) -> StreamingResponse:
    feed = request.app.state.metrics.request_log

    async def events():
        sub = feed.subscribe()  # here, not before: a reader that never starts reading holds no queue
        try:
            yield b": subscribed\n\n"
            while True:
                got = await sub.next(KEEPALIVE_SECONDS)
                if got is None:
                    yield b": keep-alive\n\n"
                    continue
                record, dropped = got
                body = {"type": "request", **record.to_dict(), "dropped": dropped}
                yield f"data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()
        finally:
            feed.unsubscribe(sub)

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
