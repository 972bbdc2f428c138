"""`hearth daemon`, `ps`, `load`, `unload` and `log stream` against one real daemon with the starter model.

The module's daemon is started by `hearth daemon up` in a data folder of its own and stopped by
`hearth daemon down` at the end, which checks that nothing of it is left: processes, port, file.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import httpx
import psutil
import pytest

from engine.worker.supervisor import free_port
from tests.engine.commands.daemon_helpers import (
    MODEL,
    WORKER_FLAGS,
    daemon_down,
    daemon_up,
    hearth,
    hearth_json,
)


def _follow(home, *args: str) -> subprocess.Popen:
    """`hearth log stream ARGS` running in the background."""
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "log", "stream", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "HEARTH_HOME": str(home)},
    )  # fmt: skip


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    home = tmp_path_factory.mktemp("daemon-home")
    info = daemon_up(home)
    yield home, info
    follower = _follow(home)  # a reader of the request log does not hold the stop up
    assert "Following the requests of" in follower.stderr.readline()
    down = daemon_down(home)
    _, err = follower.communicate(timeout=30)
    assert follower.returncode == 1 and "closed the stream (it stopped)" in err
    assert "shutdown took over" not in (home / "logs" / "daemon.log").read_text()
    assert down == {"stopped": True, "pid": info["pid"]}
    assert not psutil.pid_exists(info["pid"]) or psutil.Process(info["pid"]).status() == psutil.STATUS_ZOMBIE
    assert not psutil.pid_exists(info["worker_pid"]) or psutil.Process(info["worker_pid"]).status() == psutil.STATUS_ZOMBIE
    assert not (home / "daemon.json").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{info['url']}/health", timeout=2)
    assert hearth_json("daemon", "status", home=home, expect=3)["running"] is False


def test_status_names_the_running_daemon_and_up_again_keeps_it(daemon):
    home, info = daemon
    status = hearth_json("daemon", "status", home=home)
    assert status["running"] is True
    assert (status["pid"], status["worker_pid"], status["url"]) == (info["pid"], info["worker_pid"], info["url"])
    assert status["base_url"] == f"{info['url']}/v1"
    assert "admin_key" not in status
    assert psutil.Process(status["worker_pid"]).ppid() == status["pid"]  # the daemon supervises its worker
    if os.name != "nt":  # the file holds the admin key: its owner's only
        assert stat.S_IMODE((home / "daemon.json").stat().st_mode) == 0o600
    again = hearth_json("daemon", "up", home=home)
    assert again["started"] is False and again["pid"] == info["pid"]
    text = hearth("daemon", "status", home=home)
    assert text.returncode == 0 and info["url"] in text.stdout and str(info["pid"]) in text.stdout


def test_load_ps_and_unload_drive_the_daemons_worker(daemon):
    home, _ = daemon
    loaded = hearth_json("load", MODEL, home=home)
    assert loaded["name"] == MODEL and loaded["state"] == "loaded"
    assert loaded["backend"] == "llamacpp" and loaded["context_length"] == 1024
    ps = hearth_json("ps", home=home)
    (row,) = [m for m in ps["models"] if m["name"] == MODEL]
    assert row["context_length"] == 1024 and row["slots"] == 2
    assert row["size_bytes"] > 50 * 2**20  # the plan's weights, KV cache and buffers
    assert row["idle_seconds"] >= 0 and row["expires_in"] is None and row["running"] == 0
    table = hearth("ps", home=home)
    assert table.returncode == 0 and MODEL in table.stdout and "1024" in table.stdout
    assert table.stdout.splitlines()[1].endswith("never")  # no --idle-ttl: nothing unloads it
    # A keep-alive for this load (`lms load --ttl`): ps says when it unloads; `never` takes it back.
    kept = hearth("load", MODEL, "--ttl", "10m", home=home)
    assert kept.returncode == 0 and "it unloads after 10 min idle" in kept.stdout, kept.stderr
    (row,) = hearth_json("ps", home=home)["models"]
    assert row["keep_alive"] == 600 and 590 < row["expires_in"] <= 600
    assert re.search(r" in (9 min \d+ s|10 min)$", hearth("ps", home=home).stdout.splitlines()[1])
    assert hearth_json("load", MODEL, "--ttl", "never", home=home)["keep_alive"] is None
    assert hearth_json("ps", home=home)["models"][0]["expires_in"] is None
    # Settings for one load: the model is reloaded with them, and a load without settings loads it as saved
    # again (a load's settings never outlive the admin's next load).
    small = hearth_json("load", MODEL, "--ctx", "512", "--parallel", "1", home=home)
    assert small["context_length"] == 512
    (row,) = hearth_json("ps", home=home)["models"]
    assert (row["context_length"], row["slots"]) == (512, 1)
    too_big = hearth("load", MODEL, "--ctx", "99999999", home=home)  # refused with what would fit...
    assert too_big.returncode == 1 and "would fit" in too_big.stderr
    assert len(too_big.stderr.strip().splitlines()) == 1, too_big.stderr
    assert [m["context_length"] for m in hearth_json("ps", home=home)["models"]] == [512]  # ...and the model stays
    assert hearth_json("load", MODEL, home=home)["context_length"] == 1024
    assert hearth_json("unload", "--all", home=home) == {"unloaded": [MODEL]}
    assert hearth_json("ps", home=home)["models"] == []
    assert hearth_json("unload", MODEL, home=home) == {"unloaded": []}
    neither = hearth("unload", home=home)
    assert neither.returncode == 2 and "--all" in neither.stderr


def test_log_stream_shows_each_chat_with_model_dialect_tokens_and_timings(daemon):
    home, info = daemon
    follower = _follow(home, "--json", "--count", "2")
    try:
        assert "Following the requests of" in follower.stderr.readline()  # subscribed: what follows is seen
        import openai

        client = openai.OpenAI(base_url=info["base_url"], api_key="none", max_retries=0, timeout=120)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=8, temperature=0
        )
        answer = raw.parse()
        ollama = httpx.post(
            f"{info['url']}/api/chat", timeout=120,
            json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": False,
                  "options": {"temperature": 0, "num_predict": 4}},
        ).json()  # fmt: skip
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["model"] == MODEL and first["dialect"] == "openai" and first["status"] == "ok"
    assert first["path"] == "/v1/chat/completions"
    # the id the response named, where the SDK reads it (OpenAI's header; Anthropic's too)
    assert first["request_id"] == answer._request_id == raw.headers["request-id"] and first["request_id"].startswith("req_")
    assert first["prompt_tokens"] == answer.usage.prompt_tokens
    assert first["completion_tokens"] == answer.usage.completion_tokens == 8
    assert first["ttft_ms"] > 0 and first["tokens_per_second"] > 0 and first["dropped"] == 0
    assert second["dialect"] == "ollama" and second["path"] == "/api/chat"
    assert second["completion_tokens"] == ollama["eval_count"] and second["prompt_tokens"] == ollama["prompt_eval_count"]


def test_chat_talks_to_the_daemons_worker_and_shows_in_its_log_and_ps(daemon):
    home, _ = daemon
    follower = _follow(home, "--json", "--count", "1")
    try:
        assert "Following the requests of" in follower.stderr.readline()
        said = hearth("chat", "-t", "0", "--max-tokens", "8", "--stats", "Name a colour.", home=home)
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() and "Starting the Hearth daemon" not in said.stderr
    assert "[8 tokens," in said.stderr
    (event,) = [json.loads(line) for line in out.splitlines()]
    assert (event["path"], event["model"], event["completion_tokens"]) == ("/v1/chat/completions", MODEL, 8)
    (row,) = hearth_json("ps", home=home)["models"]
    assert row["name"] == MODEL and row["context_length"] == 1024  # the daemon's settings, not a copy of its own
    hearth_json("unload", "--all", home=home)


def test_chat_starts_a_daemon_when_none_runs_and_it_keeps_running(tmp_path):
    # the model's saved settings (a small context, one thread) are what the daemon's load takes
    (tmp_path / "load-settings.json").write_text(json.dumps({MODEL: {"n_ctx": 256, "n_threads": 1}}))
    try:
        said = hearth("chat", "-t", "0", "--max-tokens", "4", "Hi", home=tmp_path, timeout=300)
        assert said.returncode == 0, said.stderr
        assert said.stderr.startswith("Starting the Hearth daemon for this chat; it keeps running")
        status = hearth_json("daemon", "status", home=tmp_path)
        assert status["running"] is True
        (row,) = hearth_json("ps", home=tmp_path)["models"]
        assert (row["name"], row["context_length"]) == (MODEL, 256)
        assert hearth_json("daemon", "down", home=tmp_path)["stopped"] is True
        # `hearth load` likewise: its whole point is the worker's
        loaded = hearth("load", MODEL, "--ttl", "10m", home=tmp_path, timeout=300)
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stderr.startswith("Starting the Hearth daemon for `hearth load`; it keeps running")
        assert loaded.stdout.startswith(f"Loaded {MODEL} on llamacpp with 256 tokens of context")
    finally:
        assert hearth_json("daemon", "down", home=tmp_path)["stopped"] is True


def test_up_with_a_model_that_does_not_load_fails_with_the_loads_sentence(tmp_path):
    up = hearth("daemon", "up", "--port", str(free_port()), "--model", "nosuch", *WORKER_FLAGS, home=tmp_path)
    assert up.returncode == 1
    assert up.stderr.strip().splitlines() == [
        "hearth: Model 'nosuch' is not available locally; run `hearth models` to list models or `hearth pull` to get one."
    ]
    assert hearth_json("daemon", "status", home=tmp_path, expect=3)["running"] is False  # not left running


def test_the_admin_routes_need_the_daemons_key(daemon):
    home, info = daemon
    wrong = hearth("log", "stream", "--url", info["url"], home=home, env={"HEARTH_ADMIN_KEY": "not-the-key"})
    assert wrong.returncode == 1
    assert wrong.stderr.strip().splitlines() == [
        f"hearth: The worker at {info['url']} refused the key; set HEARTH_ADMIN_KEY to its admin key."
    ]
    assert httpx.get(f"{info['url']}/api/worker", timeout=10).status_code == 401


def test_without_a_daemon_each_command_says_what_to_do(tmp_path):
    for args in (("ps",), ("unload", "--all"), ("log", "stream")):  # (`hearth load` starts one)
        out = hearth(*args, home=tmp_path)
        assert out.returncode == 1, args
        assert out.stderr.strip().splitlines() == [
            "hearth: No Hearth daemon is running; start one with `hearth daemon up`, or name a worker with --url."
        ]
    assert hearth_json("daemon", "status", home=tmp_path, expect=3)["running"] is False
    assert hearth_json("daemon", "down", home=tmp_path) == {"stopped": False, "pid": None}


def _admin(home) -> dict[str, str]:
    return {"Authorization": f"Bearer {json.loads((home / 'daemon.json').read_text())['admin_key']}"}


def _jit_ctx(info, home) -> int:
    """Unload the starter, ask it a question through /v1/chat/completions (a just-in-time load), and read the
    context each sequence got from /api/stats."""
    hearth_json("unload", "--all", home=home)
    reply = httpx.post(f"{info['base_url']}/chat/completions", timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0})  # fmt: skip
    assert reply.status_code == 200, reply.text
    stats = httpx.get(f"{info['url']}/api/stats", headers=_admin(home), timeout=10).json()
    return stats["models"][MODEL]["n_ctx_per_sequence"]


def test_saved_load_settings_are_used_by_every_load_jit_included(daemon):
    home, info = daemon
    settings_url = f"{info['url']}/api/models/{MODEL}/settings"
    try:
        saved = hearth_json("load", MODEL, "--ctx", "768", "--batch", "64", "--parallel", "1", "--save", home=home)
        assert (saved["context_length"], saved["saved"]) == (768, True)
        got = httpx.get(settings_url, headers=_admin(home), timeout=10).json()
        assert got["settings"]["n_ctx"] == 768 and got["settings"]["n_batch"] == 64 and got["loaded"] is True
        assert got["settings"]["n_seq_max"] == 1  # the slots are saved too
        refused = hearth("load", MODEL, "--ctx", "99999999", "--save", home=home)  # settings that do not load...
        assert refused.returncode == 1 and "would fit" in refused.stderr
        assert httpx.get(settings_url, headers=_admin(home), timeout=10).json()["settings"]["n_ctx"] == 768  # ...are not saved
        assert _jit_ctx(info, home) == 768  # a request's load takes the saved settings, not the worker's 1024
        stats = httpx.get(f"{info['url']}/api/stats", headers=_admin(home), timeout=10).json()
        assert stats["models"][MODEL]["slots"] == 1  # and the saved slots, not the worker's 2
        assert hearth_json("load", MODEL, home=home)["context_length"] == 768
        put = httpx.put(settings_url, headers=_admin(home), timeout=10, json={"n_ctx": 640, "kv_type": "q8_0"})
        assert put.status_code == 200 and put.json()["settings"]["n_ctx"] == 640
        assert _jit_ctx(info, home) == 640
        bad = httpx.put(settings_url, headers=_admin(home), timeout=10, json={"n_ctx": 1024, "kv_typo": "f16"})
        assert bad.status_code == 400 and "kv_typo" in bad.json()["error"]["message"]
        bad = httpx.put(settings_url, headers=_admin(home), timeout=10, json={"rope_scale": 0.5})
        assert bad.status_code == 400 and "rope_scale" in bad.json()["error"]["message"]
        assert httpx.get(settings_url, headers=_admin(home), timeout=10).json()["settings"]["n_ctx"] == 640
    finally:
        httpx.put(settings_url, headers=_admin(home), timeout=10, json={})  # forgotten: the worker's own again
        hearth_json("unload", "--all", home=home)
    assert httpx.get(settings_url, headers=_admin(home), timeout=10).json()["settings"]["n_ctx"] is None
    assert _jit_ctx(info, home) == 1024
    hearth_json("unload", "--all", home=home)


def test_ollamas_num_ctx_reloads_the_model_with_it_and_later_requests_keep_it(daemon):
    home, info = daemon

    def ask(**options):
        reply = httpx.post(f"{info['url']}/api/chat", timeout=120, json={
            "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": False,
            "options": {"temperature": 0, "num_predict": 2, **options}})  # fmt: skip
        return reply

    def n_ctx() -> int:
        return httpx.get(f"{info['url']}/api/stats", headers=_admin(home), timeout=10).json()["models"][MODEL]["n_ctx_per_sequence"]

    try:
        assert ask(num_ctx=512).status_code == 200 and n_ctx() == 512
        assert ask().status_code == 200 and n_ctx() == 512  # no load options: the model as it is loaded
        assert ask(num_ctx=896, num_thread=1).status_code == 200 and n_ctx() == 896
        bad = ask(num_ctx="big")
        assert bad.status_code == 400 and "options.num_ctx" in bad.json()["error"]
        too_big = ask(num_ctx=99_999_999)
        assert too_big.status_code == 400 and "would fit" in too_big.json()["error"] and n_ctx() == 896
    finally:
        hearth_json("unload", "--all", home=home)
