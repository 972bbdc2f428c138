"""Who may do what (issue 33, part 4): an inference key runs models in every dialect, the admin key also opens
what reads the disk or changes state, every route is in one class or the other, and `hearth serve` will not
listen beyond loopback with no key at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fastapi.routing import APIWebSocketRoute
from fastapi.testclient import TestClient
from starlette.routing import WebSocketRoute

from engine.server import ServerSettings, create_app
from engine.server.access import ROUTE_ACCESS, Access, route_access

ROOT = "http://127.0.0.1:8765"
INFERENCE_KEY = "inference-key-1"
ADMIN_KEY = "admin-key-1"
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    manager = ModelManager(registry, options=LoadOptions(n_ctx=1024, n_seq_max=2))
    yield manager
    manager.close()
    registry.close()


def client_for(manager, **settings) -> TestClient:
    return TestClient(create_app(ServerSettings(**settings), manager), base_url=ROOT)


@pytest.fixture(scope="module")
def split(manager):
    with client_for(manager, api_keys=(INFERENCE_KEY,), admin_keys=(ADMIN_KEY,)) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def concrete(path: str) -> str:
    """A request path for a route's path template ({name} -> x)."""
    import re

    return re.sub(r"\{[^}]+\}", "x", path)


def app_routes(manager) -> set[tuple[str, str]]:
    """(method, path template) of every route of the app, those of included routers too."""
    try:  # FastAPI 0.165 keeps included routers whole in app.routes; this walks into them
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI copies their routes into app.routes

        def iter_route_contexts(routes):
            return routes

    app = create_app(ServerSettings(), manager)
    routes = set()
    for route in iter_route_contexts(app.routes):
        if isinstance(getattr(route, "route", route), WebSocketRoute | APIWebSocketRoute):  # a method of its own
            routes.add(("WEBSOCKET", route.path))
            continue
        assert route.path and route.methods, f"{route!r} has no path or methods to classify"
        for method in route.methods:
            routes.add((method, route.path))
    return routes


def test_every_route_is_classified_and_the_table_names_only_routes(manager):
    routes = app_routes(manager)
    # HEAD is answered as GET where the framework adds it; a route of its own (Ollama's HEAD /) is listed.
    unclassified = sorted(
        r for r in routes if r not in ROUTE_ACCESS and not (r[0] == "HEAD" and ("GET", r[1]) in ROUTE_ACCESS)
    )
    assert unclassified == [], "classify these routes in engine/server/access.py (ROUTE_ACCESS)"
    assert sorted(set(ROUTE_ACCESS) - routes) == [], "ROUTE_ACCESS names routes the app does not have"
    for (method, path), access in ROUTE_ACCESS.items():
        assert route_access(method, concrete(path)) is access, (method, path)


def test_the_issues_inference_and_admin_routes_are_in_their_class():
    for method, path in [
        ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/v1/embeddings"), ("GET", "/v1/models"),
        ("POST", "/v1/responses"), ("POST", "/v1/messages"), ("POST", "/api/chat"), ("POST", "/api/generate"),
        ("POST", "/api/embed"), ("POST", "/api/embeddings"), ("POST", "/api/show"), ("GET", "/api/tags"),
        ("GET", "/api/ps"), ("GET", "/api/version"),
    ]:  # fmt: skip
        assert route_access(method, path) is Access.INFERENCE, path
    for method, path in [
        ("POST", "/api/docs/collections"), ("POST", "/api/docs/search"), ("POST", "/api/models/import"),
        ("POST", "/api/models/load"), ("POST", "/api/models/unload"), ("POST", "/api/downloads"),
        ("POST", "/api/remotes"), ("DELETE", "/api/models/some/model"), ("DELETE", "/api/delete"), ("POST", "/api/pull"),
        ("GET", "/api/models"), ("GET", "/api/fit"), ("GET", "/api/hub/search"), ("GET", "/no/such/route"),
    ]:  # fmt: skip
        assert route_access(method, path) is Access.ADMIN, path


def test_an_inference_key_gets_403_on_every_admin_route(split):
    for (method, path), access in ROUTE_ACCESS.items():
        if access is not Access.ADMIN:
            continue
        r = split.request(method, concrete(path), json={}, headers=bearer(INFERENCE_KEY))
        assert r.status_code == 403, (method, path, r.text)
        if method == "HEAD":  # the status alone
            assert split.request(method, concrete(path)).status_code == 401, (method, path)
            continue
        body = r.json()
        message = body["error"] if isinstance(body["error"], str) else body["error"]["message"]
        assert message == "This key can only run models; admin routes need the admin key."
        assert split.request(method, concrete(path), json={}).status_code == 401, (method, path)
    # Ollama's clients read their own error shape.
    assert split.post("/api/pull", json={"model": "a/b"}, headers=bearer(INFERENCE_KEY)).json() == {
        "error": "This key can only run models; admin routes need the admin key."
    }


def test_an_inference_key_learns_nothing_about_paths_or_routes(split, starter_path, tmp_path):
    answers = {
        split.post("/api/models/load", json={"model": model}, headers=bearer(INFERENCE_KEY)).text
        for model in (str(starter_path), str(tmp_path / "missing.gguf"), "/etc/passwd")
    }
    answers |= {split.post("/api/models/no/such/route", json={}, headers=bearer(INFERENCE_KEY)).text}
    assert len(answers) == 1  # the same 403, whatever exists
    # a path in Ollama's part of /api: the same sentence, in Ollama's shape
    other = split.post("/api/no/such/route", json={}, headers=bearer(INFERENCE_KEY))
    assert other.status_code == 403 and other.json()["error"] == json.loads(answers.pop())["error"]["message"]
    # OPTIONS is no way around the key (only a browser's CORS preflight goes without one)
    probes = {split.options(path).status_code for path in ("/api/models/load", "/api/no/such/route", "/v1/models")}
    assert probes == {401}
    assert split.post("/api/no/such/route", json={}, headers=bearer(ADMIN_KEY)).status_code == 404
    # What the inference routes say of a model names it, never where its file is.
    key = bearer(INFERENCE_KEY)
    shown = [
        split.post("/api/show", json={"model": MODEL}, headers=key),
        split.get("/api/tags", headers=key),
        split.get("/api/ps", headers=key),
        split.get("/v1/models", headers=key),
        split.get(f"/v1/models/{MODEL}", headers=key),
    ]
    assert all(r.status_code == 200 for r in shown), [r.text for r in shown]
    assert not [r.url for r in shown if str(starter_path.parent) in r.text]
    assert shown[0].json()["modelfile"] == f"# Served by Hearth\nFROM {MODEL}\n"


def test_an_inference_key_runs_models_in_every_dialect(split):
    key = bearer(INFERENCE_KEY)
    assert split.get("/v1/models", headers=key).status_code == 200
    assert split.get("/api/tags", headers=key).status_code == 200
    r = split.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2,
            "temperature": 0,
        },
        headers=key,
    )
    assert r.status_code == 200, r.text
    r = split.post(
        "/api/generate",
        json={"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 2}},
        headers=key,
    )
    assert r.status_code == 200, r.text
    r = split.post(
        "/v1/messages",
        json={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
        headers={"x-api-key": INFERENCE_KEY, "anthropic-version": "2023-06-01"},
    )
    assert r.status_code == 200, r.text
    wrong = split.post(
        "/v1/messages", json={}, headers={"x-api-key": "wrong", "anthropic-version": "2023-06-01"}
    )
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"


def test_the_admin_key_works_everywhere(split):
    key = bearer(ADMIN_KEY)
    assert split.get("/api/models", headers=key).status_code == 200
    assert split.get("/api/remotes", headers=key).status_code == 200
    assert split.get("/api/docs/collections", headers=key).status_code == 200
    assert split.get("/v1/models", headers=key).status_code == 200
    r = split.post(
        "/api/generate",
        json={"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 2}},
        headers=key,
    )
    assert r.status_code == 200, r.text
    assert split.get("/health").status_code == 200  # open to all


def test_a_single_api_key_still_opens_every_route(manager):
    with client_for(manager, api_keys=("only-key",)) as client:
        for path in ("/api/models", "/api/remotes", "/v1/models", "/api/tags"):
            assert client.get(path, headers=bearer("only-key")).status_code == 200, path
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers=bearer("wrong")).status_code == 401, path


def test_an_admin_key_alone_guards_only_the_admin_routes(manager):
    with client_for(manager, admin_keys=(ADMIN_KEY,)) as client:
        assert client.get("/v1/models").status_code == 200
        assert client.get("/api/models").status_code == 401
        assert client.get("/api/models", headers=bearer(ADMIN_KEY)).status_code == 200
        # with no inference key, the open inference routes are the loopback user's, who drives loads as
        # Ollama's clients do (load options, keep_alive); document collections still need the admin key
        assert client.post("/api/generate", json={"model": MODEL, "prompt": "", "keep_alive": 0}).status_code == 200


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HEARTH_API_KEY", "HEARTH_ADMIN_KEY"))}
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
    )


def test_serving_another_address_without_a_key_is_refused():
    from engine.worker.net import free_port

    done = serve("--host", "0.0.0.0", "--port", str(free_port("0.0.0.0")))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "0.0.0.0" in lines[0] and "HEARTH_API_KEY" in lines[0] and "--insecure-no-key" in lines[0]


@pytest.mark.parametrize("flag", ["--api-key", "--admin-key"])
def test_an_empty_key_is_refused_at_start(flag):
    from engine.worker.net import free_port

    done = serve("--host", "0.0.0.0", "--port", str(free_port("0.0.0.0")), flag, "")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert flag in lines[0] and "empty" in lines[0]


def test_the_keys_and_hosts_reach_the_settings():
    from engine.cli import build_parser
    from engine.commands.serve import server_settings

    args = build_parser().parse_args(
        [
            "serve",
            "--api-key",
            "a",
            "--admin-key",
            "b",
            "--allowed-host",
            "hearth.lan",
            "--allowed-host",
            "box",
        ]
    )
    settings = server_settings(args, {"HEARTH_API_KEYS": "c, d", "HEARTH_ADMIN_KEY": "e"})
    assert settings.api_keys == ("a", "c", "d")
    assert settings.admin_keys == ("b", "e")
    assert settings.allowed_hosts == ("hearth.lan", "box")


def test_windows_binds_the_port_for_the_worker_alone():
    import socket

    from engine.worker.net import listen_options

    assert listen_options("win32", exclusive=-5) == ((socket.SOL_SOCKET, -5, 1),)
    assert (
        listen_options("win32", exclusive=None) == ()
    )  # never SO_REUSEADDR there: it lets others bind the port
    assert listen_options("linux") == ((socket.SOL_SOCKET, socket.SO_REUSEADDR, 1),)


def _ps(client: TestClient) -> dict:
    r = client.get("/api/ps", headers=bearer(ADMIN_KEY))
    assert r.status_code == 200, r.text
    return {m["name"].removesuffix(":latest"): m for m in r.json()["models"]}


def test_an_inference_key_cannot_reload_or_unload_the_model_for_everyone(split):
    """Load options and a shorter keep_alive change the model every client uses: the admin key's. An
    inference key may send the settings the model has, and a longer keep_alive."""
    key, admin = bearer(INFERENCE_KEY), bearer(ADMIN_KEY)
    assert split.post("/api/models/load", json={"model": MODEL}, headers=admin).status_code == 200
    assert _ps(split)[MODEL]["context_length"] == 1024
    hi = [{"role": "user", "content": "Hi"}]
    refused = [
        split.post("/api/generate", json={"model": MODEL, "prompt": "", "keep_alive": 0}, headers=key),
        split.post("/api/chat", json={"model": MODEL, "messages": [], "keep_alive": "5m"}, headers=key),
        split.post("/api/embed", json={"model": MODEL, "input": "hi", "keep_alive": 0}, headers=key),
        split.post("/api/chat", json={"model": MODEL, "messages": hi, "stream": False,
                                      "options": {"num_ctx": 512, "num_thread": 1, "num_predict": 2}}, headers=key),
        # every dialect's keep_alive passes the same check
        split.post("/v1/chat/completions", json={"model": MODEL, "messages": hi, "max_tokens": 2, "keep_alive": 0},
                   headers=key),
        split.post("/v1/messages", json={"model": MODEL, "messages": hi, "max_tokens": 2, "keep_alive": "1m"},
                   headers=key),
        split.post("/v1/responses", json={"model": MODEL, "input": "Hi", "max_output_tokens": 16, "keep_alive": 0},
                   headers=key),
    ]  # fmt: skip
    for r in refused:
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        message = error if isinstance(error, str) else error["message"]  # Ollama's string, the others' object
        assert "admin key" in message and message.endswith(".")
    assert _ps(split)[MODEL]["context_length"] == 1024  # loaded as it was, by nobody's request
    same = {"model": MODEL, "messages": hi, "stream": False, "options": {"num_ctx": 1024, "num_predict": 2}}
    assert split.post("/api/chat", json=same, headers=key).status_code == 200
    assert split.post("/api/models/unload", json={"model": MODEL}, headers=admin).status_code == 200
    assert split.post("/api/chat", json=same, headers=key).status_code == 200  # what a load without them takes
    assert _ps(split)[MODEL]["context_length"] == 1024
    longer = {"model": MODEL, "prompt": "", "keep_alive": -1}
    assert split.post("/api/generate", json=longer, headers=key).status_code == 200
    # The admin key reloads it with a request's settings; its next load without settings undoes them.
    small = {"model": MODEL, "messages": hi, "stream": False, "options": {"num_ctx": 512, "num_predict": 2}}
    assert split.post("/api/chat", json=small, headers=admin).status_code == 200
    assert _ps(split)[MODEL]["context_length"] == 512
    assert split.post("/api/models/load", json={"model": MODEL}, headers=admin).status_code == 200
    assert _ps(split)[MODEL]["context_length"] == 1024


def test_an_inference_request_without_keep_alive_leaves_the_admins_keep_alive(manager):
    """Without keep_alive a request gives the model the server's idle TTL back (Ollama's way); from an
    inference key that would cut short the admin's longer keep-alive, so it leaves it as it is."""
    from engine.backends import LoadOptions
    from engine.pool import ModelManager

    hour = ModelManager(manager.registry, options=LoadOptions(n_ctx=1024, n_seq_max=1), idle_ttl=3600)
    try:
        with client_for(hour, api_keys=(INFERENCE_KEY,), admin_keys=(ADMIN_KEY,)) as client:
            keep = {"model": MODEL, "prompt": "", "keep_alive": -1}
            assert client.post("/api/generate", json=keep, headers=bearer(ADMIN_KEY)).status_code == 200
            ask = {"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 1}}
            assert client.post("/api/generate", json=ask, headers=bearer(INFERENCE_KEY)).status_code == 200
            assert _ps(client)[MODEL]["expires_at"].startswith("2318-")  # still for good, as the admin asked
            assert client.post("/api/generate", json=ask, headers=bearer(ADMIN_KEY)).status_code == 200
            assert not _ps(client)[MODEL]["expires_at"].startswith("2318-")  # the admin's: the idle TTL again
    finally:
        hour.close()


def test_without_keys_an_ollama_request_still_reloads_and_unloads(manager):
    with client_for(manager) as client:
        small = {"model": MODEL, "prompt": "", "options": {"num_ctx": 512}}
        assert client.post("/api/generate", json=small).status_code == 200
        assert _ps(client)[MODEL]["context_length"] == 512
        unloaded = client.post("/api/generate", json={"model": MODEL, "prompt": "", "keep_alive": 0})
        assert unloaded.status_code == 200 and unloaded.json()["done_reason"] == "unload"
        assert MODEL not in _ps(client)


def _indexed(client: TestClient, name: str, folder) -> None:
    import time

    admin = bearer(ADMIN_KEY)
    r = client.post("/api/docs/collections", json={"name": name, "paths": [str(folder)]}, headers=admin)
    assert r.status_code == 202, r.text
    assert r.json()["shared"] is False  # a new collection is the admin's alone
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        progress = client.get(f"/api/docs/collections/{name}", headers=admin).json()["progress"]
        if progress and progress["phase"] in ("done", "failed", "cancelled"):
            assert progress["phase"] == "done", progress
            return
        time.sleep(0.2)
    raise AssertionError(f"indexing {name} did not finish")


def test_an_inference_key_reads_only_shared_collections_and_sees_file_names(split, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "bees.md").write_text("# Bees\n\nThe queen of the hive is called Marigold.\n")
    name = "keys-notes"
    _indexed(split, name, folder)
    key, admin = bearer(INFERENCE_KEY), bearer(ADMIN_KEY)

    def chat(names: list[str], headers: dict, path: str = "/v1/chat/completions"):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Who is the queen?"}], "hearth": {"collections": names}}
        if path == "/api/chat":
            return split.post(path, json={**body, "stream": False, "options": {"num_predict": 1, "temperature": 0}}, headers=headers)
        return split.post(path, json={**body, "max_tokens": 1, "temperature": 0}, headers=headers)

    try:
        # Not shared, or not there at all: the same 403, in each dialect's shape, so names cannot be guessed.
        for path in ("/v1/chat/completions", "/api/chat"):
            answers = [chat([name], key, path), chat(["no-such-collection"], key, path)]
            assert [r.status_code for r in answers] == [403, 403], [r.text for r in answers]
            assert answers[0].json() == answers[1].json()
            assert "admin key" in answers[0].text and name not in answers[0].text
        assert chat(["no-such-collection"], admin).status_code == 400  # the admin learns what is missing

        shared = split.put(f"/api/docs/collections/{name}/shared", json={"shared": True}, headers=admin)
        assert shared.status_code == 200 and shared.json()["shared"] is True
        assert split.put(f"/api/docs/collections/{name}/shared", json={"shared": True}, headers=key).status_code == 403
        r = chat([name], key)
        assert r.status_code == 200, r.text
        (source,) = r.json()["hearth"]["sources"]
        assert source["path"] == "bees.md" and source["uri"] is None and "Marigold" in source["text"]
        assert str(tmp_path) not in r.text
        (source,) = chat([name], admin).json()["hearth"]["sources"]
        assert source["path"] == str((folder / "bees.md").resolve()) and source["uri"].startswith("file://")

        split.put(f"/api/docs/collections/{name}/shared", json={"shared": False}, headers=admin)
        assert chat([name], key).status_code == 403
    finally:
        split.delete(f"/api/docs/collections/{name}", headers=admin)


def test_paths_no_file_can_have_are_a_400_in_one_sentence_on_the_admin_routes(split, starter_path, tmp_path):
    """A name past NAME_MAX, a path past PATH_MAX and a NUL were 500s (ENAMETOOLONG) on each route."""
    admin = bearer(ADMIN_KEY)
    for bad in (str(tmp_path / ("n" * 300)), "/" + "/".join(["d" * 200] * 30), str(tmp_path / "a\0b")):
        answers = [
            split.post("/api/models/import", json={"path": bad}, headers=admin),
            split.post("/api/models/import", json={"path": str(starter_path), "mmproj": bad}, headers=admin),
            split.post("/api/folders", json={"path": bad}, headers=admin),
            split.request("DELETE", "/api/folders", params={"path": bad}, headers=admin),
            split.post("/api/docs/collections", json={"name": "long-paths", "paths": [bad]}, headers=admin),
            split.get("/api/fit", params={"model": bad}, headers=admin),
        ]
        for r in answers:
            assert r.status_code == 400, (r.request.url, r.text[:300])
            message = r.json()["error"]["message"]
            assert message.endswith("; check the path.") and message.count(". ") == 0, message
            assert "Errno" not in message and len(message) < 300, message
    assert "long-paths" not in split.get("/api/docs/collections", headers=admin).text


def test_hearths_own_api_segments_are_those_of_the_apps_routes(manager):
    """Errors under /api answer in Ollama's shape except on Hearth's own routes (dialect.HEARTH_API_SEGMENTS)."""
    from engine.server import ollama_create, ollama_models, ollama_routes
    from engine.server.dialect import HEARTH_API_SEGMENTS

    routers = (ollama_routes.router, ollama_models.router, ollama_create.router, ollama_create.upload_router)
    ollamas = {r.path.split("/")[2] for router in routers for r in router.routes}
    own = {path.split("/")[2] for _, path in app_routes(manager) if path.startswith("/api/")} - ollamas
    assert ollamas >= {"chat", "generate", "tags"} and own == HEARTH_API_SEGMENTS
