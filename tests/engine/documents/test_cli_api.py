"""`hearth docs`, `hearth chat --docs` and /api/docs as a user and the app meet them: subprocesses, the
starter model, a real `hearth serve`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.engine.documents.conftest import PDF_PAGES, write_pdf

pytestmark = pytest.mark.slow


def hearth(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "small"
    root.mkdir()
    write_pdf(root / "manual.pdf", PDF_PAGES[:2])
    (root / "bees.md").write_text("# Bees\n\nThe hive is inspected every nine days in swarming season.\n")
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 nothing else")
    return root


def test_docs_add_list_search_rm(small_corpus: Path):
    out = hearth("docs", "add", "cli-home", str(small_corpus), "--json")
    assert out.returncode == 0, out.stderr
    added = json.loads(out.stdout)
    assert added["files"] == 2 and added["embedded"] == added["chunks"] > 0
    assert [Path(f["path"]).name for f in added["failed"]] == ["broken.pdf"]
    assert "Traceback" not in out.stderr

    listed = json.loads(hearth("docs", "list", "--json").stdout)
    assert any(c["name"] == "cli-home" and c["chunks"] == added["chunks"] and not c["shared"] for c in listed)
    # shared with the inference keys' chats, and no longer
    assert "chats made with an inference key may use it" in hearth("docs", "share", "cli-home").stdout
    assert re.search(r"^cli-home: 2 files, .*, shared\)$", hearth("docs", "list").stdout, re.M)
    assert hearth("docs", "share", "cli-home", "--off").returncode == 0
    assert [c["shared"] for c in json.loads(hearth("docs", "list", "--json").stdout) if c["name"] == "cli-home"] == [False]

    out = hearth("docs", "search", "cli-home", "how do I restore the thermostat's factory schedule", "--k", "2", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["mode"] == "hybrid"
    top = result["hits"][0]
    assert (Path(top["path"]).name, top["page"]) == ("manual.pdf", 2) and top["score"] > 0
    assert len(result["hits"]) == 2

    text = hearth("docs", "search", "cli-home", "hive", "--mode", "keyword")
    assert "bees.md (Bees)" in text.stdout

    assert hearth("docs", "rm", "cli-home").returncode == 0
    gone = hearth("docs", "search", "cli-home", "hive")
    assert gone.returncode == 1
    assert gone.stderr.strip().splitlines() == [
        "hearth: There is no collection named 'cli-home'; run `hearth docs list` to see them."
    ]


def test_docs_add_refuses_a_missing_path_in_one_line(tmp_path: Path):
    out = hearth("docs", "add", "nothing", str(tmp_path / "nope"))
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and "does not exist" in out.stderr


def test_chat_with_docs_answers_then_lists_its_sources(small_corpus: Path):
    assert hearth("docs", "add", "chat-home", str(small_corpus), "--no-embed").returncode == 0
    out = hearth("chat", "--docs", "chat-home", "--temperature", "0", "--max-tokens", "12", "How do I reset the thermostat?")
    assert out.returncode == 0, out.stderr
    answer, _, sources = out.stdout.partition("Sources:")
    assert answer.strip()
    lines = [line.strip() for line in sources.strip().splitlines()]
    # the whole (small) collection went in, one numbered source per passage, each with its file and place
    assert re.match(r"\[1\] bees\.md, Bees ", lines[0])
    assert any(re.match(r"\[\d\] manual\.pdf, page 2 ", line) and str(small_corpus / "manual.pdf") in line for line in lines)
    assert any(re.match(r"\[\d\] manual\.pdf, page 1 ", line) for line in lines)
    assert hearth("chat", "--docs", "no-such", "hi").stderr.count("no collection named 'no-such'") == 1
    assert hearth("docs", "rm", "chat-home").returncode == 0


def _wait(client: httpx.Client, name: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/api/docs/collections/{name}").json()
        progress = body["progress"]
        if progress and progress["phase"] in ("done", "failed", "cancelled"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"indexing {name} did not finish")


def test_the_api_indexes_searches_and_builds_the_context(small_corpus: Path):
    from engine.worker.supervisor import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--port", str(port), "--api-key", "k1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer k1"}, timeout=120)
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.2)

        r = client.post("/api/docs/collections", json={"name": "api-home", "paths": [str(small_corpus)]})
        assert r.status_code == 202, r.text
        body = _wait(client, "api-home")
        assert body["progress"]["phase"] == "done", body
        assert body["embedded"] == body["chunks"] > 0
        assert [Path(f["path"]).name for f in body["failed"]] == ["broken.pdf"]

        r = client.post("/api/docs/search", json={"collections": ["api-home"], "query": "hive inspection", "k": 3})
        assert r.status_code == 200, r.text
        assert r.json()["modes"] == {"api-home": "hybrid"}
        assert Path(r.json()["hits"][0]["path"]).name == "bees.md"

        r = client.post("/api/docs/context", json={"collections": ["api-home"], "question": "thermostat reset"})
        ctx = r.json()
        assert ctx["whole_documents"] is True
        labels = [s["label"] for s in ctx["sources"]]
        assert labels == ["[1] bees.md, Bees", "[2] manual.pdf, page 1", "[3] manual.pdf, page 2"]
        assert ctx["sources"][2]["uri"].endswith("manual.pdf#page=2")
        assert "[3] (manual.pdf, page 2)" in ctx["system"]

        # a folder change is picked up without asking (the watcher polls)
        (small_corpus / "wasps.md").write_text("# Wasps\n\nWasps nest in the shed roof in July.\n")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            hits = client.post(
                "/api/docs/search", json={"collections": ["api-home"], "query": "wasps shed", "mode": "keyword"}
            ).json()["hits"]
            if hits:
                break
            time.sleep(0.5)
        assert hits and Path(hits[0]["path"]).name == "wasps.md"

        r = client.post("/api/docs/collections/api-home/jump")
        assert r.status_code == 400 and r.json()["error"]["message"]
        assert client.get("/api/docs/collections/nope").status_code == 404
        assert client.post("/api/docs/collections", json={"name": "x", "paths": ["/no/such/path"]}).status_code == 400
        assert client.delete("/api/docs/collections/api-home").json() == {"deleted": "api-home"}
        assert "api-home" not in {c["name"] for c in client.get("/api/docs/collections").json()["collections"]}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
