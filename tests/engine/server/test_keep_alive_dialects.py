"""Ollama's `keep_alive` in every dialect's requests: how long the model stays loaded after the answer (0:
unloaded then; a negative number or "never": kept), shown by /api/stats as `hearth ps` shows it."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from engine.server import ServerSettings, create_app

MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": "Hi"}]
BODIES = {
    "/v1/chat/completions": {"model": MODEL, "messages": ASK, "max_tokens": 2, "temperature": 0},
    "/v1/completions": {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0},
    "/v1/messages": {"model": MODEL, "messages": ASK, "max_tokens": 2, "temperature": 0},
    "/v1/responses": {"model": MODEL, "input": "Hi", "max_output_tokens": 16, "temperature": 0},
}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=1, n_threads=1))
    with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as client:
        yield client
    manager.close()
    registry.close()


def _residency(api) -> dict | None:
    loaded = [m for m in api.get("/api/stats").json()["loaded"] if m["name"] == MODEL]
    return loaded[0] if loaded else None


def test_keep_alive_sets_how_long_the_model_stays_in_every_dialect(api):
    for path, body in BODIES.items():
        for value, seconds in (("10m", 600), (-1, None), ("never", None), (90, 90)):
            r = api.post(path, json={**body, "keep_alive": value})
            assert r.status_code == 200, (path, r.text)
            assert _residency(api)["keep_alive"] == seconds, (path, value)  # None: it never unloads
        bad = api.post(path, json={**body, "keep_alive": "soon"})
        assert bad.status_code == 400 and "'keep_alive' must be seconds" in bad.text, (path, bad.text)
    r = api.post("/v1/messages", json={**BODIES["/v1/messages"], "keep_alive": 0})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30  # the idle unloader looks once a second
    while _residency(api) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _residency(api) is None  # unloaded after the answer


def test_the_openapi_pattern_says_what_the_server_reads():
    import re

    from engine.errors import InvalidRequest
    from engine.server.api_models import KEEP_ALIVE_PATTERN
    from engine.validation import request_keep_alive

    for text in ("10m", "1h30m", "500ms", "90", "1.5", "never", " 5m ", "0", "soon", "", "-5", "10x", "m", "1e3"):
        try:
            request_keep_alive(text)
            read = True
        except InvalidRequest:
            read = False
        assert bool(re.fullmatch(KEEP_ALIVE_PATTERN, text)) == read, text
    assert request_keep_alive(1e30) == request_keep_alive(-1) == -1.0  # past a year, or negative: never
