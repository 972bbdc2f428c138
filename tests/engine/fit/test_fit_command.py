"""`hearth fit` and `GET /api/fit` print the memory model's breakdown; a worker asked for settings
that cannot fit refuses the model with what would fit, and serves on."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.engine.server.conftest import MODEL, Server
from tests.engine.server.tiny_vision import MODEL_PATH as VISION_PATH


def hearth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=120)


def test_hearth_fit_prints_the_breakdown(starter_path):
    out = hearth("fit", str(starter_path), "--ctx", "2048", "--parallel", "3", "--kv-type", "q8_0", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    plan = report["plan"]
    assert (plan["n_ctx"], plan["parallel"], plan["kv_type"], plan["where"]) == (2048, 3, "q8_0", "CPU")
    assert report["kv_bytes_per_token"] == 30 * 3 * 64 * 2 * 34 // 32
    mem = plan["memory"]
    assert mem["kv_cache_bytes"] == report["kv_bytes_per_token"] * 2048 * 3
    assert mem["total_bytes"] == sum(mem[k] for k in ("weights_bytes", "kv_cache_bytes", "buffers_bytes", "runtime_bytes"))
    assert set(report["facts"]["weights_by_type"]) == {"Q4_1", "Q8_0", "F32"}
    text = hearth("fit", str(starter_path), "--parallel", "2")
    assert text.returncode == 0 and "2 slots of 4,096 tokens, 16-bit KV cache, on CPU" in text.stdout
    assert "weights" in text.stdout and "KV cache" in text.stdout and "total" in text.stdout


def test_hearth_fit_says_what_would_fit_when_asked_for_too_much(starter_path):
    out = hearth("fit", str(starter_path), "--ctx", "3000000", "--parallel", "16", "--kv-type", "f16")
    assert out.returncode == 1
    assert "16 slots of 3,000,000 tokens need about" in out.stdout and "would fit" in out.stdout


@pytest.fixture(scope="module")
def greedy_server():
    server = Server("--ctx", "3000000", "--parallel", "16", "--kv-type", "f16")
    yield server
    server.stop()


def test_a_worker_refuses_settings_that_cannot_fit_and_names_what_would(greedy_server):
    r = httpx.post(
        f"{greedy_server.base_url}/chat/completions",
        headers=greedy_server.headers,
        json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        timeout=120,
    )
    assert r.status_code >= 400
    message = r.json()["error"]["message"]
    assert "16 slots of 3,000,000 tokens need about" in message and "would fit" in message
    stats = httpx.get(f"{greedy_server.root}/api/stats", headers=greedy_server.headers, timeout=10).json()
    assert stats["loaded"] == []


def test_api_fit_gives_the_same_numbers_as_the_cli(greedy_server, starter_path):
    params = {"model": MODEL, "ctx": 2048, "parallel": 2}
    r = httpx.get(f"{greedy_server.root}/api/fit", params=params, headers=greedy_server.headers, timeout=60)
    assert r.status_code == 200, r.text
    api = r.json()
    from engine.fit.report import fit_model
    from engine.hardware import detect_hardware

    cli = fit_model(str(starter_path), detect_hardware(), n_ctx=2048, n_seq=2).to_dict()  # what `hearth fit` prints
    assert api["plan"]["parallel"] == 2 and api["fits"] is True
    for key in ("weights_bytes", "kv_cache_bytes", "buffers_bytes"):
        assert api["plan"]["memory"][key] == cli["plan"]["memory"][key]
    from engine.fit.probe import load_cached

    # the speed model's figures too, from the figures kept for this machine (the tests' fixed ones)
    machine = load_cached(detect_hardware().identity)
    speed = fit_model(str(starter_path), detect_hardware(), n_ctx=2048, n_seq=2, machine=machine).to_dict()["speed"]
    assert api["speed"]["decode_tokens_per_s"] == pytest.approx(speed["decode_tokens_per_s"])
    assert api["speed"]["summary"].startswith("about ") and api["speed_chat"]["depth"] == 1024
    bad = httpx.get(f"{greedy_server.root}/api/fit", params={"model": MODEL, "kv_type": "q5"}, headers=greedy_server.headers)
    assert bad.status_code == 400 and "kv_type" in bad.text
    missing = httpx.get(f"{greedy_server.root}/api/fit", params={"model": "no-such-model"}, headers=greedy_server.headers)
    assert missing.status_code == 404


def test_hearth_fit_counts_a_draft_model_named_as_serve_takes_it(starter_path):
    args = ("fit", str(starter_path), "--ctx", "2048", "--parallel", "2", "--json")
    plain = json.loads(hearth(*args).stdout)["plan"]
    out = hearth(*args, "--speculative", f"draft:{starter_path}")  # the starter drafting for itself
    assert out.returncode == 0, out.stderr
    drafted = json.loads(out.stdout)
    plan = drafted["plan"]
    assert plain["draft_bytes"] == 0 < plan["draft_bytes"]
    assert plan["memory"]["total_bytes"] - plain["memory"]["total_bytes"] == plan["draft_bytes"]
    assert drafted["facts"]["draft"]["shape"] == drafted["facts"]["shape"]
    # prompt lookup needs no memory of its own
    ngram = json.loads(hearth(*args, "--speculative", "ngram").stdout)["plan"]
    assert ngram["memory"]["total_bytes"] == plain["memory"]["total_bytes"]
    text = hearth("fit", str(starter_path), "--ctx", "2048", "--parallel", "2", "--speculative", f"draft:{starter_path}")
    assert text.returncode == 0 and "draft model's cache" in text.stdout
    assert [line for line in text.stdout.splitlines() if line.strip().startswith("draft ")]
    refused_vocabulary = (f"draft:{VISION_PATH}", "because their vocabularies differ (it has 49195 tokens and the model 49152")
    for bad, says in (("draft:no-such-draft", "'no-such-draft' is not available locally"), ("sometimes", "auto, ngram, draft:MODEL or off"),
                      refused_vocabulary):
        refused = hearth("fit", str(starter_path), "--speculative", bad)
        assert refused.returncode == 1 and says in refused.stderr and "Traceback" not in refused.stderr


def test_api_fit_counts_the_draft_model_as_the_cli_does(greedy_server, starter_path):
    from engine.fit.report import fit_model
    from engine.hardware import detect_hardware

    speculative = f"draft:{starter_path}"
    params = {"model": MODEL, "ctx": 2048, "parallel": 2, "speculative": speculative}
    r = httpx.get(f"{greedy_server.root}/api/fit", params=params, headers=greedy_server.headers, timeout=60)
    assert r.status_code == 200, r.text
    cli = fit_model(str(starter_path), detect_hardware(), n_ctx=2048, n_seq=2, speculative=speculative).to_dict()
    assert r.json()["plan"]["draft_bytes"] == cli["plan"]["draft_bytes"] > 0
    bad = httpx.get(f"{greedy_server.root}/api/fit", params={**params, "speculative": "draft:"}, headers=greedy_server.headers)
    assert bad.status_code == 400 and "draft:MODEL" in bad.text
