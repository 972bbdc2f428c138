"""Servers for `hearth bench` to measure: a real `hearth serve` with the starter model, and a small
OpenAI-shaped server that fails some requests on purpose (the one thing a real server won't do on cue)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from engine.starter import STARTER_NAME

API_KEY = "bench-test-key"


@pytest.fixture(scope="module")
def hearth_server():
    """`hearth serve` on the llama.cpp backend: 4 slots of 1,024 tokens, a free port, an API key."""
    from engine.worker.supervisor import WorkerSupervisor

    sup = WorkerSupervisor(
        port=0,
        model=STARTER_NAME,
        api_key=API_KEY,
        extra_args=["--backend", "llamacpp", "--parallel", "4", "--ctx", "1024"],
        startup_timeout=180,
    )
    sup.start()
    yield sup
    sup.stop()


class FakeOpenAIServer:
    """Streams chat completions like OpenAI, but what it does depends on the user message:
    ``ok`` streams four chunks and usage; ``http500`` answers 500; ``drop`` cuts the connection
    mid-stream; ``sse-error`` sends an error event; ``slow`` streams ``SLOW_CHUNKS`` chunks a
    ``SLOW_DELAY`` apart. ``finished`` counts the streams it completed."""

    SLOW_CHUNKS = 20
    SLOW_DELAY = 0.02  # a stream of 0.4 s: the Ctrl-C test waits for three of them, then stops the fourth

    def __init__(self) -> None:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        self.finished = 0

        async def models(request):
            return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

        def event(payload) -> bytes:
            return f"data: {json.dumps(payload)}\n\n".encode()

        def chunk(content: str | None, finish: str | None = None) -> dict:
            delta = {"content": content} if content is not None else {}
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "fake-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        async def chat(request):
            body = await request.json()
            kind = body["messages"][-1]["content"].split()[0]
            if kind == "http500":
                return JSONResponse(
                    {"error": {"message": "the fake server fails here", "type": "server_error"}}, 500
                )
            n, delay = (self.SLOW_CHUNKS, self.SLOW_DELAY) if kind == "slow" else (4, 0.0)

            async def stream():
                yield event(
                    chunk(None)
                    | {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
                )
                for i in range(n):
                    if kind == "drop" and i == 2:
                        raise ConnectionResetError("the fake server drops this stream")
                    if kind == "sse-error" and i == 2:
                        yield event(
                            {
                                "error": {
                                    "message": "generation failed in the fake server",
                                    "type": "server_error",
                                }
                            }
                        )
                        return
                    await asyncio.sleep(delay)
                    yield event(chunk(f" w{i}"))
                yield event(chunk(None, "length"))
                usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
                yield event({**chunk(None), "choices": [], "usage": usage})
                yield b"data: [DONE]\n\n"
                self.finished += 1

            return StreamingResponse(stream(), media_type="text/event-stream")

        app = Starlette(
            routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])]
        )
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> FakeOpenAIServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture
def fake_server():
    server = FakeOpenAIServer().start()
    yield server
    server.stop()
