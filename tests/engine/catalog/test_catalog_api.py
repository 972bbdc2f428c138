"""The catalog endpoints of the admin API, over the real app, against the fake hub."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from tests.engine.catalog.conftest import BIG, TINY


@pytest.fixture
def api(hub, registry):
    from engine.catalog.services import CatalogServices
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    manager = ModelManager(registry)
    catalog = CatalogServices(registry, endpoint=hub.url)
    app = create_app(ServerSettings(), manager, catalog)
    with TestClient(app, base_url="http://127.0.0.1") as client:  # a loopback Host, as a real client sends
        yield client
    catalog.close()
    manager.close()


def test_hardware_says_what_runs_here_and_why(api):
    body = api.get("/api/hardware").json()
    assert body["hardware"]["ram_total"] > 0
    kinds = {b["format"]: b for b in body["backends"]}
    assert kinds["gguf"]["backend"] == "llamacpp"
    assert kinds["gguf"]["reason"]


def test_search_and_variants_with_advisor_labels(api):
    found = api.get("/api/hub/search", params={"q": "llama", "format": "gguf"}).json()["results"]
    repos = [r["repo"] for r in found]
    assert TINY in repos and BIG in repos
    # no speed threshold: the fit alone decides (an 8B model can be slow here, and then none is recommended)
    body = api.get("/api/hub/variants", params={"repo": BIG, "ctx": 4096, "min_speed": 0}).json()
    names = {v["name"] for v in body["variants"]}
    assert {"Q4_K_M", "Q8_0"} <= names
    for v in body["variants"]:
        assert v["fit"] in ("gpu", "partial", "cpu", "none")
        assert v["label"] and v["detail"]
    rec = [v for v in body["variants"] if v["recommended"]]
    assert len(rec) == 1 and body["recommendation"]["variant"] == rec[0]["name"]
    assert body["recommendation"]["reason"]
    # at the default threshold every variant that fits says how fast it would be here; what is slow is not recommended
    default = api.get("/api/hub/variants", params={"repo": BIG, "ctx": 4096}).json()
    fitting = [v for v in default["variants"] if v["fit"] != "none"]
    assert fitting and all(" tok/s" in v["speed"] for v in fitting)
    assert not [v for v in default["variants"] if v["recommended"] and v["slow"]]
    if default["recommendation"] is None:
        assert all(v["slow"] for v in fitting) and "under 10 tok/s here" in default["reason"]
    assert api.get("/api/hub/variants", params={"repo": BIG, "min_speed": -1}).status_code == 400


def test_unknown_repo_is_a_clear_404(api):
    r = api.get("/api/hub/variants", params={"repo": "nobody/nothing"})
    assert r.status_code == 404
    assert r.json()["error"]["message"].endswith(".")


def test_download_to_completion_appears_in_models(api):
    job = api.post("/api/downloads", json={"repo": TINY, "variant": "Q8_0"}).json()
    assert job["state"] in ("queued", "running", "done")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = {d["id"]: d for d in api.get("/api/downloads").json()["downloads"]}
        if states[job["id"]]["state"] in ("done", "failed"):
            break
        time.sleep(0.1)
    done = states[job["id"]]
    assert done["state"] == "done", done
    assert done["bytes_done"] == done["bytes_total"] > 0
    names = [m["id"] for m in api.get("/v1/models").json()["data"]]
    assert f"{TINY}:Q8_0" in names
    r = api.delete(f"/api/models/{TINY}:Q8_0")
    assert r.json() == {"deleted": f"{TINY}:Q8_0"}
    assert f"{TINY}:Q8_0" not in [m["id"] for m in api.get("/v1/models").json()["data"]]


def test_import_a_local_gguf_and_refuse_a_bad_path(api, starter_path):
    r = api.post("/api/models/import", json={"path": str(starter_path), "name": "my-smol"})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "my-smol" and r.json()["quantization"] == "Q4_1"
    bad = api.post("/api/models/import", json={"path": "/nope/model.gguf"})
    assert bad.status_code == 400
    assert "/nope/model.gguf" in bad.json()["error"]["message"]


def test_importing_a_pipe_or_an_unreadable_file_is_a_400_not_a_wait(api, tmp_path):
    """Opening a named pipe waits for a writer forever (and held one of the worker's shared threads); a file the
    system cannot read (/proc/self/mem) raised past the route."""
    import os

    os.mkfifo(tmp_path / "pipe.gguf")
    for path, words in ((tmp_path / "pipe.gguf", "not a regular file"), ("/dev/zero", "not a regular file"),
                        ("/proc/self/mem", "cannot be read")):  # fmt: skip
        r = api.post("/api/models/import", json={"path": str(path), "name": "x"})
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
