"""`hearth bench` against a real `hearth serve`, a server that fails requests, and no server at all."""

from __future__ import annotations

import hashlib
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.cli import main
from tests.engine.bench.conftest import API_KEY

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("throughput.png", "ttft.png", "tpot.png", "latency_distribution.png")


def hearth(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def engine_counters(sup) -> dict:
    stats = httpx.get(
        sup.base_url.removesuffix("/v1") + "/api/stats", headers=sup.headers(), timeout=10
    ).json()
    return stats["models"]["smollm2-135m-instruct"]


def check_distribution(d: dict, n: int) -> None:
    assert d["n"] == n
    assert 0 < d["p50"] <= d["p95"] <= d["p99"] <= d["max"]


def test_run_against_hearth_serve_writes_a_complete_plausible_report(hearth_server, starter_path, tmp_path):
    before = engine_counters(hearth_server)
    out = tmp_path / "report"
    rc = main(
        [
            "bench",
            "--url",
            hearth_server.base_url,
            "--api-key",
            API_KEY,
            "--concurrency",
            "1,4",
            "--requests",
            "6",
            "--input-len",
            "uniform:8-16",
            "--output-len",
            "fixed:8",
            "--warmup",
            "1",
            "--watts",
            "50",
            "--price-per-kwh",
            "0.25",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    after = engine_counters(hearth_server)
    report = json.loads((out / "bench.json").read_text())

    # The set-up names the model file, its hash and quantization, the backend and its version, the machine.
    (server,) = report["setup"]["servers"]
    assert server["kind"] == "hearth" and server["version"] == report["hearth_version"]
    assert server["model"] == "smollm2-135m-instruct"
    assert server["backend"] == "llamacpp"
    assert server["backend_version"].startswith("llama-cpp-python ")
    assert server["quantization"] == "Q4_1"
    assert Path(server["model_file"]) == starter_path
    assert server["model_sha256"] == hashlib.sha256(starter_path.read_bytes()).hexdigest()
    assert server["pid"] == hearth_server.pid
    assert server["details"] == {"slots": 4, "n_ctx_per_sequence": 1024}
    assert report["setup"]["hardware"]["cpu"]["cores_logical"] >= 1
    assert report["setup"]["hardware"]["ram_total"] > 0
    params = report["setup"]["parameters"]
    assert params["levels"] == [1, 4] and params["requests_per_level"] == [6, 6]
    assert params["input_len"] == "uniform:8-16" and params["output_len"] == "fixed:8"
    assert params["seed"] == 0 and params["dataset"] == "random" and "api_key" not in params
    assert (
        report["setup"]["cost_model"]["watts"] == 50
        and report["setup"]["cost_model"]["price_per_kwh"] == 0.25
    )
    assert report["interrupted"] is False

    # Every request: first token before the end, exactly the tokens asked for, as the server counted them.
    assert len(report["requests"]) == 12
    for r in report["requests"]:
        assert r["ok"] and r["error"] is None
        assert 0 < r["ttft_s"] < r["e2e_s"]
        assert r["token_source"] == "usage"
        assert r["output_tokens"] == r["max_tokens"] == 8
        assert 1 <= r["content_chunks"] <= r["output_tokens"]
        assert len(r["itl_s"]) == r["content_chunks"] - 1
        assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / 7)
        assert 8 <= r["prompt_tokens"] <= 60

    # The server's own counters moved by exactly what the report says was generated and read.
    generated = (
        sum(r["output_tokens"] for r in report["requests"]) + report["warmup"]["hearth"]["output_tokens"]
    )
    prompted = (
        sum(r["prompt_tokens"] for r in report["requests"]) + report["warmup"]["hearth"]["prompt_tokens"]
    )
    assert after["generated_tokens"] - before["generated_tokens"] == generated == 13 * 8
    assert after["prompt_tokens"] - before["prompt_tokens"] == prompted

    assert [(r["level"], r["completed"], r["failed"]) for r in report["results"]] == [(1, 6, 0), (4, 6, 0)]
    for level in report["results"]:
        assert level["complete"] and level["errors"] == {}
        assert level["output_tokens"] == 48 and level["requested_tokens_delivered"] == 1.0
        assert level["output_throughput_tok_s"] == pytest.approx(48 / level["duration_s"])
        assert level["request_throughput_req_s"] == pytest.approx(6 / level["duration_s"])
        for key in ("ttft_s", "e2e_s", "tpot_s"):
            check_distribution(level[key], 6)
        assert level["ttft_s"]["p99"] < level["e2e_s"]["max"]
        assert level["itl_s"]["n"] >= 1
        # The server maps the whole model file, so its peak resident memory is at least half of it.
        assert level["peak_rss_bytes"] > starter_path.stat().st_size / 2
        expected_cost = 50 * 0.25 / (3.6 * level["output_throughput_tok_s"])
        assert level["cost_per_million_output_tokens"] == pytest.approx(expected_cost)
        # the prefix cache's share of the prompts, as the server reported it: each level's prompts are new,
        # so at most the chat template's opening is cached, never a whole earlier prompt
        assert 0 <= level["prefix_cache_hit_rate"] < 0.9

    md = (out / "bench.md").read_text()
    assert "smollm2-135m-instruct" in md and "Q4_1" in md and server["model_sha256"][:16] in md
    assert md.count("| hearth | 1 | 6 | 0 |") == 1 and md.count("| hearth | 4 | 6 | 0 |") == 1
    assert "50 W at 0.25 per kWh" in md and "prefix cache" in md
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
        assert f"![{name}]({name})" in md


def test_drafted_and_kept_tokens_are_reported_per_run_from_the_answers_usage(hearth_server, tmp_path, capsys):
    from tests.engine.backends.test_speculative import COPY, SOURCE

    dataset = tmp_path / "copy.jsonl"
    dataset.write_text(json.dumps({"prompt": COPY, "max_tokens": 24}) + "\n")
    before = engine_counters(hearth_server)
    out = tmp_path / "report"
    # The answer copies the prediction: speculative decoding drafts from it (the prediction's own mode, ngram).
    extra = json.dumps({"prediction": {"type": "content", "content": SOURCE}})
    rc = main(
        ["bench", "--url", hearth_server.base_url, "--api-key", API_KEY, "--dataset", str(dataset)]
        + ["--concurrency", "1,2", "--requests", "2", "--warmup", "0", "--extra-body", extra, "--json", "--out", str(out)]
    )
    assert rc == 0
    printed = capsys.readouterr()
    report = json.loads(printed.out)  # --json: stdout is the report alone, the table goes to stderr
    assert report == json.loads((out / "bench.json").read_text())
    after = engine_counters(hearth_server)
    for r in report["requests"]:
        assert r["ok"] and 0 < r["accepted_draft_tokens"] <= r["draft_tokens"]
    drafted = sum(r["draft_tokens"] for r in report["requests"])
    kept = sum(r["accepted_draft_tokens"] for r in report["requests"])
    # what the report says was drafted and kept is what the server counted
    assert after["draft_tokens"] - before["draft_tokens"] == drafted
    assert after["accepted_draft_tokens"] - before["accepted_draft_tokens"] == kept
    md = (out / "bench.md").read_text()
    for level in report["results"]:
        runs = [r for r in report["requests"] if r["level"] == level["level"]]
        assert level["draft_tokens"] == sum(r["draft_tokens"] for r in runs)
        assert level["accepted_draft_tokens"] == sum(r["accepted_draft_tokens"] for r in runs)
        assert level["draft_keep_rate"] == pytest.approx(level["accepted_draft_tokens"] / level["draft_tokens"])
        assert level["drafted_output_share"] == pytest.approx(level["accepted_draft_tokens"] / level["output_tokens"])
        cell = f"{level['draft_tokens']}/{level['accepted_draft_tokens']} {level['draft_keep_rate']:.0%}"
        assert f"| {cell} |" in md
        assert f" {cell} " in printed.err  # the table's drafted/kept column
    assert "drafted/kept" in md


def test_failed_requests_are_counted_and_named_not_hidden(fake_server, tmp_path, capsys):
    dataset = tmp_path / "work.jsonl"
    kinds = ["ok", "http500", "ok", "drop", "ok", "sse-error"]
    dataset.write_text(
        "\n".join(json.dumps({"prompt": f"{k} please", "max_tokens": 4}) for k in kinds) + "\n"
    )
    out = tmp_path / "report"
    rc = main(
        [
            "bench",
            "--url",
            fake_server.url,
            "--dataset",
            str(dataset),
            "--concurrency",
            "2",
            "--requests",
            "6",
        ]
        + ["--warmup", "0", "--out", str(out)]
    )
    assert rc == 0  # some requests succeeded: the run is a result, with its failures in it
    report = json.loads((out / "bench.json").read_text())
    (level,) = report["results"]
    assert (level["requests"], level["completed"], level["failed"]) == (6, 3, 3)
    errors = level["errors"]
    assert sum(errors.values()) == 3 and len(errors) == 3
    assert any(msg.startswith("HTTP 500") and "the fake server fails here" in msg for msg in errors)
    assert any("generation failed in the fake server" in msg for msg in errors)
    assert any(msg.startswith(("stream broken", "connection error")) for msg in errors)
    assert level["output_tokens"] == 12  # only the three whole streams count as throughput
    assert level["draft_tokens"] is None and level["draft_keep_rate"] is None  # the server does not say
    failed = [r for r in report["requests"] if not r["ok"]]
    assert len(failed) == 3 and all(r["error"] for r in failed)
    (server,) = report["setup"]["servers"]
    assert server["kind"] == "unknown" and server["model"] == "fake-model" and server["backend"] == "unknown"
    md = (out / "bench.md").read_text()
    assert "## Failed requests" in md and "1 x HTTP 500" in md
    assert "3 request(s) failed" in capsys.readouterr().out


def test_a_url_that_does_not_answer_is_one_clear_line(tmp_path):
    from engine.worker.supervisor import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    out = hearth("bench", "--url", url, "--out", str(tmp_path / "r"))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("hearth: No server answers at") and url in lines[0]
    assert not (tmp_path / "r" / "bench.json").exists()


def test_speculative_is_for_the_server_bench_starts_and_a_url_is_told_what_to_send(tmp_path):
    from engine.worker.supervisor import free_port

    out = hearth("bench", "--url", f"http://127.0.0.1:{free_port()}/v1", "--speculative", "off", "--out", str(tmp_path / "r"))
    assert out.returncode == 1 and "--extra-body" in out.stderr and '"speculative": false' in out.stderr


def _signal_state(pid: int) -> str:
    """The process's signal masks as Linux shows them (blocked, ignored, caught), or nothing elsewhere."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return ""
    return " ".join(line.replace("\t", "") for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_ctrl_c_saves_and_prints_what_was_measured(fake_server, tmp_path):
    dataset = tmp_path / "slow.jsonl"
    dataset.write_text(json.dumps({"prompt": "slow please", "max_tokens": 20}) + "\n")
    out = tmp_path / "report"
    # As from a terminal: Ctrl-C is Python's to handle even where this test runs with SIGINT ignored (a shell's
    # background job ignores it, and a child inherits that).
    foreground = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); from engine.cli import main; sys.exit(main())"
    cmd = [sys.executable, "-X", "faulthandler", "-c", foreground, "bench", "--url", fake_server.url, "--dataset", str(dataset)]
    cmd += ["--concurrency", "1", "--requests", "200", "--warmup", "0", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while fake_server.finished < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_server.finished >= 3, "the benchmark did not get going"
        signals = _signal_state(proc.pid)
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=120)  # the report and its plots: seconds, more on a busy machine
        except subprocess.TimeoutExpired:  # say where it was: its signal masks, and its threads' stacks (faulthandler)
            proc.send_signal(signal.SIGABRT)
            stdout, stderr = proc.communicate(timeout=30)
            raise AssertionError(f"the benchmark went on after Ctrl-C; {signals}\n{stdout[-2000:]}\n{stderr[-6000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "Interrupted" in stdout and "partial" in stdout
    report = json.loads((out / "bench.json").read_text())
    assert report["interrupted"] is True
    (level,) = report["results"]
    assert level["complete"] is False
    assert 2 <= level["completed"] < 200 and level["failed"] == 0
    assert math.isclose(level["output_tokens"], 20 * level["completed"])
    assert "interrupted" in (out / "bench.md").read_text()


def test_poisson_arrivals_at_each_rate_give_strict_json(fake_server, tmp_path):
    dataset = tmp_path / "ok.jsonl"
    dataset.write_text(json.dumps({"prompt": "ok please", "max_tokens": 4}) + "\n")
    out = tmp_path / "report"
    rc = main(
        ["bench", "--url", fake_server.url, "--dataset", str(dataset), "--request-rate", "50,inf"]
        + ["--requests", "8", "--warmup", "0", "--out", str(out)]
    )
    assert rc == 0

    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    report = json.loads((out / "bench.json").read_text(), parse_constant=no_constants)
    assert report["setup"]["mode"] == "rate" and report["setup"]["parameters"]["levels"] == [50, "inf"]
    assert [(r["level"], r["completed"]) for r in report["results"]] == [(50, 8), ("inf", 8)]
    assert fake_server.finished == 16
    assert "req/s" in (out / "bench.md").read_text()
