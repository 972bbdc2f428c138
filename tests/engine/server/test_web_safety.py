"""No web page can use the port: the requests a DNS-rebound or cross-site page sends (issue 33, part 2) get
403 and change nothing, while the same requests from the official clients and plain httpx, which send no
Origin, are answered. In-process against the real app with the starter model and no key (the default of
`hearth serve`, where these requests used to succeed)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from fastapi.testclient import TestClient

from engine.backends import LoadOptions
from engine.server import ServerSettings, create_app

MODEL = "smollm2-135m-instruct"
PORT = 8765
ROOT = f"http://127.0.0.1:{PORT}"
SECRET = "The vault code is 4-8-15-16."
# What a page at http://attacker.example:PORT sends once its name points at 127.0.0.1 (DNS rebinding).
REBOUND = {"Host": f"attacker.example:{PORT}", "Origin": f"http://attacker.example:{PORT}"}
CROSS_SITE = {"Origin": "https://attacker.example"}  # a form post or no-cors fetch from another site


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    manager = ModelManager(registry, options=LoadOptions(n_ctx=1024, n_seq_max=2))
    yield manager
    manager.close()
    registry.close()


def make_app(manager, **settings):
    return create_app(ServerSettings(**{"host": "127.0.0.1", "port": PORT, **settings}), manager)


@pytest.fixture(scope="module")
def app(manager):
    app = make_app(manager)
    yield app
    documents = getattr(app.state, "documents", None)
    if documents is not None:
        documents.close()


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app, base_url=ROOT) as client:
        yield client


@pytest.fixture
def secret_folder(tmp_path):
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "notes.md").write_text(f"# Notes\n\n{SECRET}\n")
    return folder


def collections(client) -> set[str]:
    return {c["name"] for c in client.get("/api/docs/collections").json()["collections"]}


def assert_refused(r: httpx.Response, code: str) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == code
    assert SECRET not in r.text


def test_a_rebound_page_gets_403_for_every_request_it_tried(client, secret_folder):
    r = client.get("/api/models", headers=REBOUND)
    assert_refused(r, "host_not_allowed")
    assert r.json()["error"]["message"] == (
        "Host 'attacker.example' is not allowed; start Hearth with --allowed-host attacker.example to serve it by that name."
    )
    r = client.post(
        "/api/docs/collections", json={"name": "loot", "paths": [str(secret_folder)]}, headers=REBOUND
    )
    assert_refused(r, "host_not_allowed")
    assert "loot" not in collections(client)  # nothing was indexed
    r = client.post(
        "/api/docs/search", json={"collections": ["loot"], "query": "vault code"}, headers=REBOUND
    )
    assert_refused(r, "host_not_allowed")
    # The same Host without an Origin (a rebound page's own navigation) is refused too.
    assert client.get("/v1/models", headers={"Host": "attacker.example"}).status_code == 403


def test_text_plain_posts_from_another_site_run_nothing(manager):
    from engine.pool import ModelManager

    fresh = ModelManager(manager.registry, options=LoadOptions(n_ctx=1024, n_seq_max=2))  # nothing loaded yet
    try:
        with TestClient(create_app(ServerSettings(port=PORT), fresh), base_url=ROOT) as client:
            body = json.dumps(
                {"model": MODEL, "prompt": "Say hi", "stream": False, "options": {"num_predict": 4}}
            )
            for path, payload in [
                ("/api/generate", body),
                ("/api/pull", json.dumps({"model": "attacker/evil-model"})),
            ]:
                for origin in ("https://attacker.example", "null"):
                    r = client.post(
                        path, content=payload, headers={"Content-Type": "text/plain", "Origin": origin}
                    )
                    assert r.status_code == 403, (path, origin, r.text)
                    assert isinstance(r.json()["error"], str)  # in Ollama's error shape, for Ollama's routes
            r = client.post(
                "/api/generate", content=body, headers={"Content-Type": "text/plain", "Origin": "null"}
            )
            assert "Origin: null" in r.json()["error"]
            assert fresh.loaded() == []  # the model never loaded: no generation ran
    finally:
        fresh.close()


def test_a_cross_site_preflight_gets_no_allow_headers(manager):
    for settings in ({}, {"cors_origins": ("http://app.example",)}):
        with TestClient(make_app(manager, **settings), base_url=ROOT) as client:
            r = client.options(
                "/api/generate",
                headers={
                    **CROSS_SITE,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type",
                },
            )
            assert r.status_code == 403
            assert not [h for h in r.headers if h.startswith("access-control-allow")]
            if settings:  # the origin the user allowed is answered as CORS says
                ok = client.options(
                    "/api/generate",
                    headers={"Origin": "http://app.example", "Access-Control-Request-Method": "POST"},
                )
                assert ok.headers["access-control-allow-origin"] == "http://app.example"
                assert client.get("/api/version", headers={"Origin": "http://app.example"}).status_code == 200


def test_pages_the_guard_lets_in_get_cors_for_what_the_official_sdks_send(manager):
    """A loopback page (as Ollama answers them by default) and a --cors-origin page: the preflight of a browser
    SDK (openai-node's x-stainless-*, Anthropic's direct-browser header, Chrome's private-network ask) passes,
    and a refusal they get (a wrong key) is one they can read."""
    asks = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Private-Network": "true",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os, x-stainless-runtime, "
                                              "anthropic-dangerous-direct-browser-access, anthropic-beta"}  # fmt: skip
    for page, settings in (("http://localhost:5173", {}), ("http://app.example", {"cors_origins": ("http://app.example",)})):
        with TestClient(make_app(manager, api_keys=("k",), **settings), base_url=ROOT) as client:
            pre = client.options("/v1/chat/completions", headers={"Origin": page, **asks})
            assert pre.status_code == 200, pre.text
            assert pre.headers["access-control-allow-origin"] == page
            assert "x-stainless-runtime" in pre.headers["access-control-allow-headers"]
            assert pre.headers["access-control-allow-private-network"] == "true"
            wrong = client.get("/v1/models", headers={"Origin": page, "Authorization": "Bearer nope"})
            assert wrong.status_code == 401 and wrong.headers["access-control-allow-origin"] == page
            right = client.get("/v1/models", headers={"Origin": page, "Authorization": "Bearer k"})
            assert right.status_code == 200 and right.headers["access-control-allow-origin"] == page
            assert "retry-after" in right.headers["access-control-expose-headers"].lower()
            foreign = client.get("/v1/models", headers={**CROSS_SITE, "Authorization": "Bearer k"})
            assert foreign.status_code == 403 and "access-control-allow-origin" not in foreign.headers


def test_the_same_requests_without_an_origin_are_answered(client, app, secret_folder):
    # Ollama's documented `curl http://localhost:11434/api/generate -d '{...}'`: a form content type.
    body = json.dumps(
        {"model": MODEL, "prompt": "Say hi", "stream": False, "options": {"num_predict": 4, "temperature": 0}}
    )
    r = client.post(
        "/api/generate",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded", "Host": f"localhost:{PORT}"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["done"] is True and r.json()["response"]
    assert client.get("/api/models").status_code == 200
    try:
        r = client.post("/api/docs/collections", json={"name": "notes-ok", "paths": [str(secret_folder)]})
        assert r.status_code == 202, r.text
        app.state.documents.wait("notes-ok", 300)
        r = client.post(
            "/api/docs/search", json={"collections": ["notes-ok"], "query": "vault code", "mode": "keyword"}
        )
        assert r.status_code == 200, r.text
        assert any(SECRET in hit["text"] for hit in r.json()["hits"])
    finally:
        client.delete("/api/docs/collections/notes-ok")


def test_the_official_clients_are_answered(app):
    import ollama
    import openai

    async def run() -> tuple[str, str, list[str]]:
        transport = httpx.ASGITransport(app=app)
        oa = openai.AsyncOpenAI(
            base_url=f"{ROOT}/v1",
            api_key="none",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=transport),
        )
        chat = await oa.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Say hi"}], max_tokens=4, temperature=0
        )
        ol = ollama.AsyncClient(host=ROOT, transport=transport)
        generated = await ol.generate(
            model=MODEL, prompt="Say hi", options={"num_predict": 4, "temperature": 0}
        )
        tags = await ol.list()
        return chat.choices[0].message.content, generated.response, [m.model for m in tags.models]

    chat, generated, names = asyncio.run(run())
    assert chat and generated
    assert f"{MODEL}:latest" in names


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        f"localhost:{PORT}",
        "LocalHost.",
        "127.0.0.1",
        f"127.0.0.2:{PORT}",
        f"[::1]:{PORT}",
        "app.localhost",
    ],
)
def test_loopback_hosts_are_answered(client, host):
    assert client.get("/api/version", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["[::1].attacker.example", f"[::1].attacker.example:{PORT}", "[::1]x", "[127.0.0.1]:80:80", "localhost.attacker.example",
     f"127.0.0.1:{PORT}@attacker.example", "localhost:abc", "localhost:"],  # fmt: skip
)
def test_hosts_that_only_begin_as_loopback_are_refused(client, host):
    r = client.get("/v1/models", headers={"Host": host})
    assert_refused(r, "host_not_allowed")


@pytest.mark.parametrize(
    "origin",
    ["http://localhost:3000", "https://127.0.0.1", "http://[::1]:5173", "http://localhost", "http://0.0.0.0:8080",
     # desktop apps' own pages, as Ollama lets them in: Obsidian's, an Electron app's file, Tauri's, VS Code's
     "app://obsidian.md", "file://", "tauri://localhost", "vscode-webview://1f2e3d", "vscode-file://vscode-app"],
)  # fmt: skip
def test_pages_served_from_this_machine_and_desktop_apps_are_answered(client, origin):
    assert client.get("/api/version", headers={"Origin": origin}).status_code == 200
    r = client.options("/v1/chat/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
    assert r.headers.get("access-control-allow-origin") == origin


@pytest.mark.parametrize(
    "origin",
    [
        "null",
        "http://localhost.attacker.example",
        "chrome-extension://abcdefghijklmnop",  # an extension, from a store: listed with --cors-origin, as in Ollama
        "http://0.0.0.0.attacker.example",
        "http://127.0.0.1.attacker.example:3000",
        "ftp://localhost",
        "http://[::1].attacker.example",
        "http://127.0.0.1:80.attacker.example",
        "http://attacker.example@localhost",
        "http://localhost:abc",
    ],
)
def test_other_origins_are_refused(client, origin):
    r = client.get("/v1/models", headers={"Origin": origin})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "origin_not_allowed"


def test_hosts_the_user_allowed_and_the_bound_address(manager):
    app = make_app(manager, allowed_hosts=("hearth.lan",))
    with TestClient(app, base_url=ROOT) as client:
        assert client.get("/api/version", headers={"Host": f"hearth.lan:{PORT}"}).status_code == 200
        assert client.get("/api/version", headers={"Host": "other.lan"}).status_code == 403
    with TestClient(make_app(manager, host="192.168.7.9", api_keys=("k",)), base_url=ROOT) as client:
        key = {"Authorization": "Bearer k"}
        assert client.get("/api/version", headers={**key, "Host": f"192.168.7.9:{PORT}"}).status_code == 200
        assert client.get("/api/version", headers={**key, "Host": "hearth.lan"}).status_code == 403


def test_every_interface_with_a_key_is_reached_by_any_name_but_still_checks_the_origin(manager):
    with TestClient(make_app(manager, host="0.0.0.0", api_keys=("k",)), base_url=ROOT) as client:
        key = {"Authorization": "Bearer k"}
        assert client.get("/api/version", headers={**key, "Host": "workstation.lan:8765"}).status_code == 200
        r = client.get("/api/version", headers={**key, "Host": "workstation.lan", **CROSS_SITE})
        assert r.status_code == 403
    # With no key (--insecure-no-key) only addresses, which a page cannot rebind, and loopback names.
    with TestClient(make_app(manager, host="0.0.0.0"), base_url=ROOT) as client:
        assert client.get("/api/version", headers={"Host": "10.1.2.3:8765"}).status_code == 200
        assert client.get("/api/version", headers={"Host": "attacker.example:8765"}).status_code == 403


def test_a_chunked_body_over_the_limit_is_413(manager):
    app = make_app(manager, max_body_bytes=2048)

    def chunks():
        yield b'{"model": "' + MODEL.encode() + b'", "messages": [], "pad": "'
        for _ in range(4):
            yield b"x" * 1000
        yield b'"}'

    with TestClient(app, base_url=ROOT) as client:
        for path in ("/v1/chat/completions", "/api/chat", "/v1/messages"):
            r = client.post(path, content=chunks(), headers={"Content-Type": "application/json"})
            assert (
                "content-length" not in r.request.headers
                and r.request.headers["transfer-encoding"] == "chunked"
            )
            assert r.status_code == 413, (path, r.text)
            body = r.json()
            message = body["error"] if path == "/api/chat" else body["error"]["message"]
            assert message == "The request body is larger than 2048 bytes; send less."
        # A chunked body under the limit is served as before.
        small = iter([b'{"model": ', b'"' + MODEL.encode() + b'"}'])
        assert (
            client.post("/api/show", content=small, headers={"Content-Type": "application/json"}).status_code
            == 200
        )


def test_a_body_of_too_many_json_values_is_413_in_every_dialect_and_a_long_text_is_not(manager):
    """A body within the size limit made of millions of tiny values is refused before FastAPI validates it (which
    holds the GIL and stopped every stream for a second); a long text full of commas is one value, and is served."""
    from engine.server.guard import MAX_JSON_VALUES

    ones = ",".join(["1"] * (MAX_JSON_VALUES + 1)).encode()
    bodies = {
        "/v1/completions": b'{"model": "' + MODEL.encode() + b'", "prompt": [' + ones + b"]}",
        "/v1/chat/completions": b'{"model": "' + MODEL.encode() + b'", "messages": [], "pad": [' + ones + b"]}",
        "/api/chat": b'{"model": "' + MODEL.encode() + b'", "messages": [' + ones + b"]}",
        "/v1/messages": b'{"model": "' + MODEL.encode() + b'", "max_tokens": 1, "messages": [' + ones + b"]}",
    }
    sentence = f"The request body holds more than {MAX_JSON_VALUES:,} JSON values; send fewer items, or split them over several requests."
    with TestClient(make_app(manager), base_url=ROOT) as client:
        for path, body in bodies.items():
            r = client.post(path, content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 413, (path, r.text)
            message = r.json()["error"] if path == "/api/chat" else r.json()["error"]["message"]
            assert message == sentence, path

        def blank_first():  # blanks before the document, in chunks of their own, change nothing
            yield b"   \n"
            yield b"\t "
            yield bodies["/v1/completions"]

        r = client.post("/v1/completions", content=blank_first(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["message"] == sentence
        long_text = json.dumps({"model": MODEL, "pad": ",[{" * (MAX_JSON_VALUES + 1)}).encode()
        assert client.post("/api/show", content=long_text, headers={"Content-Type": "application/json"}).status_code == 200


def test_json_values_are_counted_exactly_only_where_the_text_could_hold_too_many():
    from engine.server.guard import json_values_over

    doc = {"a": [1, 2, {"b": [3, "x,y,[z]"]}], "c": None}  # values: root, list, 1, 2, dict, list, 3, "x..", None
    body = json.dumps(doc).encode()
    assert not json_values_over(body, 9) and json_values_over(body, 8)
    assert not json_values_over(b"[" + b",".join([b"1"] * 50) + b"]", 51) and json_values_over(b"[" + b",".join([b"1"] * 50) + b"]", 50)
    assert not json_values_over(b"[1,2,3,", 1)  # not JSON: the app answers it
    assert not json_values_over(json.dumps("," * 1000).encode(), 1)  # one string, however many commas it holds


def test_a_body_nested_deeper_than_json_reads_is_a_400_saying_what_to_do(manager):
    deep = b'{"model": "' + MODEL.encode() + b'", "messages": [], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    sentence = "The request body could not be read as JSON (it may nest too deeply); send a flatter JSON object."
    with TestClient(make_app(manager), base_url=ROOT) as client:
        for path in ("/v1/chat/completions", "/api/chat"):
            r = client.post(path, content=deep, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (path, r.text)
            assert (r.json()["error"] if path == "/api/chat" else r.json()["error"]["message"]) == sentence
        # a number longer than Python reads is said as that, not as nesting
        r = client.post("/v1/chat/completions", content=b'{"model": "x", "max_tokens": ' + b"9" * 5000 + b"}",
                        headers={"Content-Type": "application/json"})  # fmt: skip
        assert r.status_code == 400 and "a number in it has more than 4,300 digits" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ('"a\\ud800b"', "a\ufffdb"),  # a lone high surrogate
        ('"\\udc00x"', "\ufffdx"),  # a lone low one
        ('"\\udf89\\ud83c"', "\ufffd\ufffd"),  # a pair the wrong way round: two lone ones
        ('"\\ud83c\\udf89 ok"', "\U0001f389 ok"),  # a pair: the character it escapes
        ('"\\\\ud800"', "\\ud800"),  # an escaped backslash, then text: no escape
        ('"\\\\\\ud800"', "\\\ufffd"),  # an escaped backslash, then an escape
        ('{"\\ud800": "\\ud83c\\udf89"}', {"\ufffd": "\U0001f389"}),  # in a key
    ],
)
def test_lone_surrogate_escapes_are_read_as_the_replacement_character(text, read):
    from engine.server.guard import mend_surrogates

    mended = mend_surrogates(text.encode())
    assert len(mended) == len(text.encode()) and json.loads(mended) == read
