"""`hearth search`, `pull`, `import`, `rm` as a user runs them: subprocesses against the fake hub."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.engine.catalog.conftest import BIG, GATED, TINY, make_gguf
from tests.engine.catalog.test_hub import free_port
from tests.engine.fit.speed_figures import keep_figures

Q4 = "tiny-llama.Q4_K_M.gguf"


@pytest.fixture
def env(hub, tmp_path):
    environ = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    return {**environ, "HF_ENDPOINT": hub.url, "HEARTH_HOME": str(keep_figures(tmp_path / "home")), "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}


def hearth(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env, timeout=timeout)


def one_clear_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("hearth:")]
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_search_lists_variants_with_how_they_fit(env):
    out = hearth(env, "search", "llama", "--sort", "likes", "--format", "gguf", "--limit", "2")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.index(BIG) < text.index(TINY)
    lines = text.splitlines()
    q4 = next(line for line in lines if line.strip().startswith("Q4_K_M") and "4.9 GB" in line)
    assert any(label in q4 for label in ("CPU only", "fits fully on GPU", "partial offload", "will not fit"))
    assert re.search(r"about [\d.]+ tok/s", q4), q4  # and how fast it runs here
    assert "Q6_K" in text and "(2 parts)" in text and "<- recommended" in text
    data = json.loads(hearth(env, "search", "tiny", "--json").stdout)
    tiny = next(item for item in data if item["repo"] == TINY)
    assert [v["name"] for v in tiny["variants"]] == ["Q2_K", "Q4_K_M", "Q6_K", "Q8_0", "F16"]
    assert tiny["advice"]["recommended"] in {v["name"] for v in tiny["variants"]}


def test_pull_then_list_then_remove(env, tmp_path):
    out = hearth(env, "pull", f"{TINY}:Q2_K")
    assert out.returncode == 0, out.stderr
    assert f"Pulled {TINY}:Q2_K" in out.stdout and "Q2_K" in out.stdout
    path = tmp_path / "home" / "models" / "TheOrg" / "Tiny-Llama-GGUF" / "tiny-llama.Q2_K.gguf"
    assert path.is_file()
    assert f"{TINY}:Q2_K" in hearth(env, "models").stdout
    assert "already downloaded" in hearth(env, "pull", f"{TINY}:Q2_K").stdout
    refused = hearth(env, "rm", TINY)  # no terminal to ask on, and no --yes
    assert "--yes" in one_clear_line(refused) and path.exists()
    out = hearth(env, "rm", TINY, "--yes")
    assert out.returncode == 0 and "deleted its files" in out.stdout
    assert not path.exists() and TINY not in hearth(env, "models").stdout


def test_a_killed_pull_resumes_with_range(env, hub, tmp_path):
    hub.throttle[Q4] = 0.1
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "pull", f"{TINY}:Q4_K_M"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partial = tmp_path / "home" / "models" / ".partial"
    try:
        deadline = time.monotonic() + 60
        while not any(p.stat().st_size > 200_000 for p in partial.rglob("*.part")):
            assert time.monotonic() < deadline and proc.poll() is None, "the pull did not get going"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    hub.throttle.clear()
    out = hearth(env, "pull", f"{TINY}:Q4_K_M")
    assert out.returncode == 0, out.stderr
    resumed = hub.ranges(Q4)[-1]
    assert resumed is not None and int(resumed.removeprefix("bytes=").rstrip("-")) >= 200_000
    model = tmp_path / "home" / "models" / "TheOrg" / "Tiny-Llama-GGUF" / Q4
    assert model.read_bytes() == hub.repos[TINY].file(Q4).data
    assert not list(partial.rglob("*.part"))


def test_hub_errors_are_one_line_without_traceback(env):
    line = one_clear_line(hearth(env, "pull", "TheOrg/No-Such-Model"))
    assert "There is no model 'TheOrg/No-Such-Model'" in line
    assert "is gated" in one_clear_line(hearth(env, "pull", GATED))
    down = {**env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    assert "Could not reach the model hub" in one_clear_line(hearth(down, "search", "llama"))
    assert "Could not reach the model hub" in one_clear_line(hearth(down, "pull", TINY))


def test_import_registers_local_files_and_refuses_partials(env, tmp_path):
    source = tmp_path / "mine"
    source.mkdir()
    make_gguf(source / "my-model.Q8_0.gguf", label="Q8_0", n_floats=1000)
    out = hearth(env, "import", str(source / "my-model.Q8_0.gguf"), "--name", "my-model")
    assert out.returncode == 0, out.stderr
    assert "Imported my-model (gguf, Q8_0" in out.stdout
    assert "my-model" in hearth(env, "models").stdout
    part = source / "x.Q6_K-00002-of-00003.gguf"
    make_gguf(part, label="Q6_K", n_floats=10)
    assert "import the first part, x.Q6_K-00001-of-00003.gguf" in one_clear_line(hearth(env, "import", str(part)))
    out = hearth(env, "rm", "my-model", "--yes")
    assert out.returncode == 0 and "left in place" in out.stdout
    assert (source / "my-model.Q8_0.gguf").exists()


def test_pull_by_a_name_of_ollamas_library_takes_the_listed_repo(env, hub, tmp_path):
    """`hearth pull llama3.2:1b`, as `ollama pull` is typed: the repo Hearth's list has for that model; the model
    then answers to that name; a library name the list has not is one sentence."""
    from tests.hubserver import HubFile, HubRepo

    repo = "bartowski/Llama-3.2-1B-Instruct-GGUF"
    data = make_gguf(tmp_path / "listed.gguf", label="Q8_0", n_floats=1000, seed=60)
    hub.repos[repo] = HubRepo(repo, [HubFile("Llama-3.2-1B-Instruct-Q8_0.gguf", data)], tags=["gguf"])
    try:
        out = hearth(env, "pull", "llama3.2:1b")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"llama3.2:1b is Ollama's name for {repo}; pulling that")
        assert f"Pulled {repo}:Q8_0" in out.stdout
        again = hearth(env, "pull", "llama3.2:1b")  # here now, by that name
        assert again.returncode == 0 and again.stdout.startswith(f"{repo}:Q8_0 is already on this machine")
        shown = hearth(env, "show", "llama3.2:1b", "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["name"] == f"{repo}:Q8_0"
    finally:
        del hub.repos[repo]
    assert "Ollama's library that Hearth lists" in one_clear_line(hearth(env, "pull", "mistral"))


def test_chat_with_a_model_not_here_offers_to_pull_it_at_a_terminal(env, hub, tmp_path):
    """`hearth chat llama3.2:1b "..."`, as `ollama run` pulls what it lacks: at a terminal it asks, pulls the
    listed repo and answers; told no, or with no terminal, it says which command gets the model."""
    import pty
    import select

    from engine.starter import starter_model_path
    from tests.engine.test_cli import _read_until
    from tests.hubserver import HubFile, HubRepo

    repo = "bartowski/Llama-3.2-1B-Instruct-GGUF"
    hub.repos[repo] = HubRepo(repo, [HubFile("Llama-3.2-1B-Instruct-Q4_1.gguf", starter_model_path().read_bytes())],
                              tags=["gguf"])  # fmt: skip
    ask = [sys.executable, "-m", "engine.cli", "chat", "--local", "-t", "0", "--max-tokens", "4", "llama3.2:1b"]

    def at_a_terminal(answer: bytes) -> tuple[int, str]:
        main_fd, term = pty.openpty()
        proc = subprocess.Popen([*ask, "Name a colour."], stdin=term, stdout=term, stderr=term, env=env)
        os.close(term)
        seen = bytearray()
        try:
            _read_until(main_fd, b"[y/N] ", seen)
            os.write(main_fd, answer)
            proc.wait(timeout=120)
            while select.select([main_fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(main_fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(main_fd)
        return proc.returncode, bytes(seen).replace(b"\r\n", b"\n").decode()

    try:
        code, said = at_a_terminal(b"n\n")
        assert code == 1 and "get it with `hearth pull llama3.2:1b`" in said, said
        assert said.startswith(f"llama3.2:1b (Ollama's name for {repo}) is not on this machine; pull it now? [y/N]")
        piped = subprocess.run([*ask, "Name a colour."], capture_output=True, text=True, env=env, timeout=60)
        assert piped.returncode == 1 and "get it with `hearth pull llama3.2:1b`" in one_clear_line(piped)
        code, said = at_a_terminal(b"y\n")
        assert code == 0, said
        assert f"Pulled {repo}:Q4_1" in said and said.strip().splitlines()[-1].strip()  # then the answer
    finally:
        del hub.repos[repo]
