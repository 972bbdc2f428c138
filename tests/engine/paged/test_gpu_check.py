"""benchmarks/gpu_check.py at tiny sizes on the CPU, and its stage runner: a GPU run cannot lose its results."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[3]
STAGES = ["env", "kernels_float32", "cuda_graphs", "hf_parity", "quantized", "decode_attention", "decode_step",
          "workload", "transformers", "port"]  # fmt: skip


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("gpu_check", None)


def test_dry_run_appends_a_json_line_per_stage_with_every_figure(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry-run", "--out", f"{tmp_path}{os.sep}",
                           "--stream-interval", "5"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (out,) = tmp_path.glob("gpu_check-*.jsonl")
    assert not list(scratch.glob("gpu_check-*"))  # its checkpoints and the port stage's model are gone
    records = {r["stage"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert list(records) == STAGES and all(r["status"] == "ok" for r in records.values()), records
    env_record = records["env"]
    assert env_record["torch"] and env_record["triton"] and env_record["gpu"] and env_record["dry_run"] is True
    assert records["kernels_float32"]["failed"] == [] and records["kernels_float32"]["total"] >= 5
    assert [c["batch"] for c in records["cuda_graphs"]["cases"]] == [1, 3, 17]
    graph_cases = records["cuda_graphs"]["cases"]
    assert all(c["padding_stored_nothing"] and c["passed"] for c in graph_cases), graph_cases
    # no graphs on the CPU: eager is unpadded, compared within rounding, and a wrong row would be far outside it
    assert not any(c["exact"] for c in graph_cases)
    assert records["hf_parity"]["top1_agreement"] == 1.0
    for variant in ("fp8_weights", "int8_weights", "fp8_kv_cache"):
        assert records["quantized"][variant]["passed"], variant
    assert records["quantized"]["fp8_weights"]["layer"] == "FP8Linear"
    assert all(c["kv_gb_per_s"] > 0 for c in records["decode_attention"]["cases"])
    step = records["decode_step"]["batches"][0]
    assert all(step[k] > 0 for k in ("step_ms", "prepare_host_ms", "forward_ms", "lm_head_ms", "sample_host_ms",
                                     "sample_ms", "prepare_plus_sample_host_ms"))  # fmt: skip
    work = records["workload"]
    assert work["output_tokens_per_s"] > 0 and work["ttft_ms"]["p90"] > 0 and work["itl_ms"]["p50"] > 0
    assert work["prefix_caching"] is False
    assert records["port"]["levels"] == [1, 2] and all(r > 0 for r in records["port"]["ratio"].values())
    assert records["port"]["stream_interval_ms"] == 5  # the server it started was given the flag (and took it)
    assert records["transformers"]["ratio_slice"] > 0 and records["transformers"]["ratio_workload_vs_transformers"] > 0


def test_a_stage_that_raises_is_recorded_and_the_next_one_still_runs(gpu_check, tmp_path):
    import torch

    ctx = gpu_check.Context(dry=True, device=torch.device("cpu"), dtype=torch.float32, shape=gpu_check.TINY,
                            n_seqs=2, n_hf=1, lengths=(4, 8), tmp=tmp_path)  # fmt: skip

    def broken(ctx):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def slow(ctx):
        time.sleep(30)
        return {}

    stages = [gpu_check.Stage("broken", broken, 30), gpu_check.Stage("slow", slow, 1.0),
              gpu_check.Stage("failing", lambda c: {"passed": False, "why": "a check"}, 30),
              gpu_check.Stage("fine", lambda c: {"figure": 42}, 30)]  # fmt: skip
    out = tmp_path / "run.jsonl"
    out.write_text(json.dumps({"stage": "earlier run"}) + "\n")  # appended to, never overwritten
    gpu_check.run_stages(stages, ctx, gpu_check.Recorder(out), budget_s=600)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["stage"] for r in lines] == ["earlier run", "broken", "slow", "failing", "fine"]
    broken_r, slow_r, failing_r, fine_r = lines[1:]
    assert broken_r["status"] == "error" and "illegal memory access" in broken_r["error"] and broken_r["traceback"]
    assert slow_r["status"] == "timeout" and slow_r["seconds"] < 20
    assert failing_r["status"] == "fail" and fine_r == {"stage": "fine", "figure": 42, "status": "ok",
                                                        "seconds": fine_r["seconds"]}  # fmt: skip


def test_stages_past_the_budget_are_skipped_and_say_so(gpu_check, tmp_path):
    import torch

    ctx = gpu_check.Context(dry=True, device=torch.device("cpu"), dtype=torch.float32, shape=gpu_check.TINY,
                            n_seqs=2, n_hf=1, lengths=(4, 8), tmp=tmp_path)  # fmt: skip
    recorder = gpu_check.Recorder(tmp_path / "run.jsonl")
    records = gpu_check.run_stages([gpu_check.Stage("late", lambda c: {}, 60)], ctx, recorder, budget_s=5)
    assert records[0]["status"] == "skipped" and "budget" in records[0]["reason"]


def test_the_script_refuses_to_time_a_cpu_as_a_gpu(gpu_check):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gpu_check.main([]) == 2


def test_a_stream_interval_hearth_serve_refuses_is_refused_before_any_stage(gpu_check, capsys):
    assert gpu_check.parse(["--stream-interval", "25ms"]).stream_interval == 25.0
    with pytest.raises(SystemExit):
        gpu_check.parse(["--stream-interval", "5000"])
    assert "from 0 to 1000" in capsys.readouterr().err
