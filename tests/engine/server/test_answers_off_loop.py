"""A route's JSON answer is made off the event loop: an answer of many values (a chat of 4 choices of 2,000 tokens
with 20 log-probabilities each) held every other client's stream for 1.1 s while FastAPI walked it on the loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from engine.server.answers import AnswerRoute
from engine.server.dialect import JsonBodyRoute, error_route, ollama_error
from engine.settings import ServerSettings


class _Recorded(Mapping):
    """A value of an answer that notes the thread that reads it into JSON."""

    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    def __getitem__(self, key: str) -> int:
        self.seen.append(threading.get_ident())
        return 1

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1


class _Named(BaseModel):
    name: str


def _app(route_class) -> tuple[TestClient, list[int], list[int]]:
    loop_threads: list[int] = []
    seen: list[int] = []
    router = APIRouter(route_class=route_class)

    @router.post("/answer")
    async def answer() -> dict:
        loop_threads.append(threading.get_ident())
        return {"value": _Recorded(seen), "list": [1, 2.5, "x", None]}

    @router.post("/accepted", status_code=202)
    async def accepted():
        return {"ok": True}

    @router.post("/named")
    async def named() -> _Named:  # FastAPI filters the answer by its model: left to it
        loop_threads.append(threading.get_ident())
        return {"name": "a", "secret": "b"}  # type: ignore[return-value]

    app = FastAPI()
    app.include_router(router)
    return TestClient(app), loop_threads, seen


@pytest.mark.parametrize(
    "route_class", [AnswerRoute, JsonBodyRoute, error_route(ollama_error, json_body=True)]
)
def test_an_answer_is_made_json_off_the_event_loop_and_is_the_same_json(route_class):
    client, loop_threads, seen = _app(route_class)
    with client:
        r = client.post("/answer", json={})
    assert r.status_code == 200
    assert r.json() == {"value": {"a": 1}, "list": [1, 2.5, "x", None]}
    assert seen and loop_threads
    assert loop_threads[0] not in seen  # the walk over the answer ran on another thread than the route's loop


def test_a_routes_status_and_response_model_are_kept():
    client, _, _ = _app(AnswerRoute)
    with client:
        accepted = client.post("/accepted", json={})
        named = client.post("/named", json={})
    assert accepted.status_code == 202 and accepted.json() == {"ok": True}
    assert named.json() == {"name": "a"}  # filtered by its model, as FastAPI does


def test_every_route_that_answers_generations_makes_its_answer_off_the_loop(tmp_path):
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager
    from engine.server.app import create_app

    registry = ModelRegistry(tmp_path)
    manager = ModelManager(registry)  # routes are built without a model: nothing is loaded
    try:
        app = create_app(ServerSettings(), manager)
        try:  # FastAPI 0.165 keeps included routers whole in app.routes
            from fastapi.routing import iter_route_contexts

            found = [(c.path, c.methods, c.original_route) for c in iter_route_contexts(app.routes)]
        except ImportError:
            found = [(r.path, getattr(r, "methods", ()), r) for r in app.routes]
        routes = {(m, path): r for path, methods, r in found for m in methods or ()}
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages",
                     "/completion", "/infill", "/api/chat", "/api/generate", "/api/embed", "/tokenize"):  # fmt: skip
            assert isinstance(routes[("POST", path)], AnswerRoute), path
    finally:
        manager.close()
        registry.close()
