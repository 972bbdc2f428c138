"""The frozen app, built by `make package`, behaves like the unfrozen one: the window answers with the
starter model (the bundle starting itself as its worker), `hearth serve` answers the openai client,
a second launch hands over to the first, and the data folder and logs are where they belong.

Marked ``package``: `make package-test` builds the bundle and runs these (HEARTH_BUNDLE names it);
run alone with HEARTH_PACKAGE_TEST=1 they build it themselves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from engine import __version__
from engine.starter import STARTER_NAME
from engine.worker.net import free_port
from tests.packaging.helpers import ROOT, desktop_entry, validate_desktop_file

pytestmark = [
    pytest.mark.package,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux bundle"),
]

BUILD_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def appdir() -> Path:
    given = os.environ.get("HEARTH_BUNDLE")
    if given:
        path = Path(given).resolve()
        assert (path / "AppRun").is_file(), f"HEARTH_BUNDLE={given} is no AppDir; run `make package`"
        return path
    result = subprocess.run(
        ["make", "-C", str(ROOT), "package"], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return ROOT / "dist" / "Hearth.AppDir"


@pytest.fixture(scope="module")
def hearth(appdir: Path) -> Path:
    return appdir / "usr" / "bin" / "hearth"


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return {**env, "HEARTH_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}


def test_the_bundle_is_self_contained_and_of_its_edition(appdir):
    internal = appdir / "usr" / "lib" / "hearth" / "_internal"
    cuda = os.environ.get("HEARTH_EDITION", "standard") == "cuda"
    assert (internal / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    assert list((internal / "llama_cpp" / "lib").glob("libllama.*"))
    assert (internal / "PySide6" / "Qt" / "plugins" / "platforms" / "libqxcb.so").is_file()
    assert (internal / "torch").is_dir() == cuda  # torch only in the CUDA edition
    assert (internal / "engine" / "backends" / "paged").is_dir() == cuda  # its kernels' source, for Triton
    assert not (internal / "PySide6" / "Qt" / "lib" / "libQt6WebEngineCore.so.6").exists()
    validate_desktop_file(appdir / "hearth.desktop")
    assert desktop_entry(appdir / "hearth.desktop")["Exec"] == "hearth gui"


def test_the_app_answers_with_the_starter_model_and_saves_a_screenshot(appdir, tmp_path):
    home, shot = tmp_path / "home", tmp_path / "shot.png"
    result = subprocess.run(
        [str(appdir / "AppRun"), "gui", "--smoke", str(shot)],
        env=env_for(home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "answer:" in result.stdout and "screenshot:" in result.stdout, result.stdout

    image = Image.open(shot).convert("RGB")
    assert image.width >= 800 and image.height >= 500
    colours = image.getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 100  # text, icons and the code block: not a blank window

    # The answer, as the app stored it (its SQLite store in the data folder).
    from app.store.chat_store import ChatStore

    store = ChatStore(home)
    try:
        [chat] = store.list_chats()
        user, answer = store.messages(chat.id)
    finally:
        store.close()
    assert user.role == "user" and "reverses a string" in user.content
    assert answer.role == "assistant" and len(answer.content.strip()) >= 20  # e.g. a def ... return ...
    assert (
        answer.stats is not None
        and answer.stats.tokens >= 5
        and answer.stats.finish_reason in ("stop", "length")
    )
    # The worker was the bundle itself (`hearth serve`), logging into the data folder.
    assert "Hearth API listening on" in (home / "logs" / "worker.log").read_text()


def test_hearth_serve_from_the_bundle_answers_the_openai_client(hearth, tmp_path):
    from openai import OpenAI

    port = free_port("127.0.0.1")
    server = subprocess.Popen(
        [str(hearth), "serve", "--port", str(port), "--threads", "1", "--api-key", "secret"],
        env=env_for(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "hearth serve did not become healthy in 120 s"
            time.sleep(0.2)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="secret")
        assert STARTER_NAME in [m.id for m in client.models.list().data]
        reply = client.chat.completions.create(
            model=STARTER_NAME,
            messages=[{"role": "user", "content": "Name three colours."}],
            max_tokens=32,
            temperature=0,
        )
        assert reply.choices[0].message.content.strip()
        assert reply.usage.completion_tokens > 0
    finally:
        server.terminate()
        server.wait(30)


def test_a_second_launch_of_the_bundle_hands_over_to_the_first(hearth, tmp_path):
    home = tmp_path / "home"
    env = env_for(home)
    first = subprocess.Popen(
        [str(hearth), "-v", "gui"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        log = home / "logs" / "worker.log"
        deadline = time.monotonic() + 180
        while not (log.is_file() and "listening" in log.read_text()):
            assert first.poll() is None, first.stdout.read()
            assert time.monotonic() < deadline, "the first app's worker did not start"
            time.sleep(0.2)
        second = subprocess.run([str(hearth), "gui"], env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stdout + second.stderr
        time.sleep(1)
        assert first.poll() is None  # the first app runs on
        assert log.read_text().count("Hearth API listening on") == 1  # and no second worker started
    finally:
        first.terminate()
        output, _ = first.communicate(timeout=60)
    assert "a second launch asked for the window" in output
    assert first.returncode == 0, output  # SIGTERM closes the app normally, worker included


def test_the_cli_reports_its_version_and_the_bundled_starter_model(hearth, tmp_path):
    env = env_for(tmp_path / "home")
    version = subprocess.run([str(hearth), "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"hearth {__version__}"
    models = subprocess.run([str(hearth), "models"], env=env, capture_output=True, text=True, timeout=60)
    assert models.returncode == 0 and STARTER_NAME in models.stdout, models.stdout + models.stderr


def test_documents_from_the_bundle_are_embedded_offline_and_searched(hearth, tmp_path):
    """sqlite-vec's extension, the parsers and the default embedding model (converted from its zip on
    first use) all travel with the bundle: a PDF is indexed with vectors and a hybrid search finds its page."""
    import json

    from tests.engine.documents.conftest import PDF_PAGES, write_pdf

    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdf(docs / "manual.pdf", PDF_PAGES)
    (docs / "bees.md").write_text("# Bees\n\nThe hive is inspected every nine days.\n")
    env = env_for(tmp_path / "home")
    add = subprocess.run(
        [str(hearth), "docs", "add", "home", str(docs), "--json"], env=env, capture_output=True, text=True, timeout=600
    )
    assert add.returncode == 0, add.stdout + add.stderr
    info = json.loads(add.stdout)
    assert info["files"] == 2 and info["chunks"] > 0 and info["embedded"] == info["chunks"], info
    assert (tmp_path / "home" / "embeddings" / "all-MiniLM-L6-v2-f16.gguf").is_file()
    found = subprocess.run(
        [str(hearth), "docs", "search", "home", "How do I restore the thermostat's defaults?", "--mode", "hybrid", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0, found.stdout + found.stderr
    result = json.loads(found.stdout)
    top = result["hits"][0]
    assert result["mode"] == "hybrid" and Path(top["path"]).name == "manual.pdf" and top["page"] == 2, result
