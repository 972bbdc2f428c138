"""A background response (``background: true`` on ``POST /v1/responses``) cancelled before its task began: it still
ends ``cancelled``, stored, and gives its generation up (its sequence and the model are freed), as one cancelled
while it runs does (tests/engine/server/test_responses.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.requests import Request

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=2, n_threads=1))
    yield create_app(ServerSettings(), manager)
    manager.close()
    registry.close()


def _request(app) -> Request:
    scope = {"type": "http", "app": app, "method": "POST", "path": "/v1/responses", "root_path": "", "headers": [],
             "query_string": b"", "server": ("127.0.0.1", 8080), "client": ("127.0.0.1", 50000), "scheme": "http",
             "state": {}}  # fmt: skip
    return Request(scope)


def _stats(app) -> dict:
    return app.state.manager.stats().get(MODEL, {})


def test_a_background_response_cancelled_before_it_began_gives_its_generation_up(app):
    from engine.server.dialect import DialectRun
    from engine.server.responses_routes import ResponsesBody, _Live, _live, _response, _store, _turn

    async def scenario() -> dict:
        request = _request(app)
        body = ResponsesBody(model=MODEL, input="Write a long story about a cat.", max_output_tokens=400, background=True)
        turn = _turn(request, body)
        run = await DialectRun(request, turn.req).start()
        live = _Live(request, run, turn, _response(turn, run.model_name, status="queued", output=[], final=None))
        _live(request)[turn.rid] = live
        live.task.cancel()  # before the loop ever ran it
        await asyncio.wait({live.task})
        await asyncio.sleep(0)
        assert turn.rid not in _live(request)
        return _store(request).get(turn.rid).response

    ended = asyncio.run(scenario())
    assert ended["status"] == "cancelled" and ended["output"] == [] and ended["background"] is True
    deadline = time.monotonic() + 60  # its sequence goes at the engine's next step; the model is no longer held
    while (stats := _stats(app)).get("running") or stats.get("in_use"):
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)
    assert stats.get("generated_tokens", 0) < 400


def test_events_past_what_is_kept_go_oldest_first(monkeypatch):
    from engine.server import responses_routes

    monkeypatch.setattr(responses_routes, "EVENTS_KEPT", 100)
    log = responses_routes._EventLog()
    for n in range(10):
        log.add(b"%02d" % n * 15)  # 30 bytes each
    assert len(log) == 10 and log.first == 7 and log[9] == b"09" * 15 and log.whole() is None
    log = responses_routes._EventLog()
    log.add(b"x" * 500)  # one event over the bound is still kept
    assert log.whole() == (b"x" * 500,)


@pytest.mark.parametrize(("stream", "background"), [(False, False), (True, False), (False, True)])
def test_a_response_the_worker_gives_up_ends_cancelled_not_completed(app, stream, background):
    """A model unloaded under a running response (or the worker stopping) ends it ``cancelled`` with what it had
    made, its last item ``incomplete``; a stream ends with that item and no ``response.completed``."""
    import json
    import threading

    import httpx

    body = {"model": MODEL, "input": "Write a long story about a cat.", "max_output_tokens": 400, "temperature": 0,
            "stream": stream, "background": background}  # fmt: skip

    def unload_once_generating() -> None:
        deadline = time.monotonic() + 60
        while not _stats(app).get("generated_tokens"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        app.state.manager.unload(MODEL)

    async def scenario() -> tuple[httpx.Response, dict]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            unloader = threading.Thread(target=unload_once_generating)
            app.state.manager.unload(MODEL)  # generated_tokens counts from this load
            unloader.start()
            answer = await client.post("/v1/responses", json=body, timeout=120)
            rid = answer.json()["id"] if not stream else None
            while background and (await client.get(f"/v1/responses/{rid}")).json()["status"] in ("queued", "in_progress"):
                await asyncio.sleep(0.05)
            unloader.join()
            if stream:
                events = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]
                rid = events[0]["response"]["id"]
            stored = (await client.get(f"/v1/responses/{rid}")).json()
            return answer, stored

    answer, stored = asyncio.run(scenario())
    assert answer.status_code == 200, answer.text
    assert stored["status"] == "cancelled" and stored["completed_at"] is None and stored["incomplete_details"] is None
    assert stored["output"] and stored["output"][-1]["status"] == "incomplete"
    assert stored["usage"]["output_tokens"] < 400
    if stream:
        kinds = [line[7:] for line in answer.text.splitlines() if line.startswith("event: ")]
        assert kinds[-1] == "response.output_item.done" and "response.completed" not in kinds
    elif not background:
        assert answer.json()["status"] == "cancelled"
