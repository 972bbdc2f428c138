"""``GET /api/log/stream``: each generation request as it finishes, as server-sent events (admin key).

The stream opens with a ``: subscribed`` comment (records from then on reach this reader), then sends one
``data:`` event per finished request: the fields of :class:`engine.server.request_log.RequestRecord`,
``"type": "request"``, and ``dropped``, how many records this reader missed since the last one it got
(it read too slowly: its queue was full). A comment every few seconds keeps idle connections open and
notices readers that left; the stream ends when the worker stops.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

router = APIRouter(prefix="/api")

KEEPALIVE_SECONDS = 10.0
POLL_SECONDS = 0.5  # how soon a stream notices that the worker stops


# Out of /openapi.json: a stream that never ends is no operation a schema fuzzer (or client generator) can call.
@router.get("/log/stream", include_in_schema=False)
async def log_stream(request: Request) -> StreamingResponse:
    feed = request.app.state.metrics.request_log
    stopping = request.app.state.manager.stopping

    async def events():
        sub = feed.subscribe()  # here, not before: a reader that never starts reading holds no queue
        try:
            yield b": subscribed\n\n"
            quiet = 0.0
            while not stopping.is_set():  # the worker is stopping: end the stream, don't hold the exit up
                got = await sub.next(POLL_SECONDS)
                if got is None:
                    quiet += POLL_SECONDS
                    if quiet >= KEEPALIVE_SECONDS:
                        quiet = 0.0
                        yield b": keep-alive\n\n"
                    continue
                quiet = 0.0
                record, dropped = got
                body = {"type": "request", **record.to_dict(), "dropped": dropped}
                yield f"data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()
        finally:
            feed.unsubscribe(sub)

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
