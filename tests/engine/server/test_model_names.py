"""Over HTTP, ``model`` names a registered model, never a file: a path to a GGUF file is refused in every
dialect with the answer an unknown name gets, the same whether a file is there or not."""

from __future__ import annotations

import httpx
import pytest

from tests.engine.server.conftest import MODEL

QUESTION = [{"role": "user", "content": "Hi"}]
REFUSAL = "is not found; `hearth models` (or GET /v1/models) lists the models there are."

# (path, body with the model to try, where the error's message is)
ROUTES = [
    ("/v1/chat/completions", lambda m: {"model": m, "messages": QUESTION, "max_tokens": 2}, ("error", "message")),
    ("/v1/completions", lambda m: {"model": m, "prompt": "Hi", "max_tokens": 2}, ("error", "message")),
    ("/v1/embeddings", lambda m: {"model": m, "input": "Hi"}, ("error", "message")),
    ("/v1/messages", lambda m: {"model": m, "messages": QUESTION, "max_tokens": 2}, ("error", "message")),
    ("/v1/responses", lambda m: {"model": m, "input": "Hi", "max_output_tokens": 2}, ("error", "message")),
    ("/api/chat", lambda m: {"model": m, "messages": QUESTION, "stream": False}, ("error",)),
    ("/api/generate", lambda m: {"model": m, "prompt": "Hi", "stream": False}, ("error",)),
    ("/api/models/load", lambda m: {"model": m}, ("error", "message")),
]


def _refusal(server, path: str, body: dict, where: tuple[str, ...]) -> tuple[int, str]:
    r = httpx.post(f"{server.root}{path}", json=body, headers=server.headers, timeout=120)
    value = r.json()
    for key in where:
        value = value[key]
    return r.status_code, value


@pytest.mark.parametrize(("path", "body", "where"), ROUTES, ids=[r[0] for r in ROUTES])
def test_a_gguf_path_is_refused_the_same_whether_the_file_exists_or_not(server, starter_path, tmp_path, path, body, where):
    candidate = tmp_path / "private" / "model.gguf"
    before = _refusal(server, path, body(str(candidate)), where)  # nothing there yet
    candidate.parent.mkdir()
    candidate.symlink_to(starter_path)  # a real model file now sits at the same path
    after = _refusal(server, path, body(str(candidate)), where)
    assert before == after == (404, f"Model '{candidate}' {REFUSAL}")
    # The starter's own file, by its path, is no name either; by its name it answers.
    assert _refusal(server, path, body(str(starter_path)), where) == (404, f"Model '{starter_path}' {REFUSAL}")


def test_a_registered_name_still_answers_and_a_path_loads_nothing(server, starter_path):
    with httpx.Client(base_url=server.root, headers=server.headers, timeout=120) as c:
        loaded_before = {m["name"] for m in c.get("/api/stats").json()["loaded"]}
        refused = c.post("/api/models/load", json={"model": str(starter_path)})
        loaded_after = {m["name"] for m in c.get("/api/stats").json()["loaded"]}
        named = c.post("/v1/chat/completions", json={"model": MODEL, "messages": QUESTION, "max_tokens": 2, "temperature": 0})
    assert refused.status_code == 404 and loaded_after == loaded_before
    assert named.status_code == 200 and named.json()["model"] == MODEL
