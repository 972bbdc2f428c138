"""The fit plan knows MoE: an MoE GGUF whose layers do not all fit the GPU keeps the fewest layers' experts in
RAM that let every layer go there ("fits with experts on the CPU"), on the tiny random-weight Qwen3-MoE
(tests/engine/fit/tiny_moe.py); and what it predicts against a real worker's resident memory."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import psutil
import pytest

from engine.fit import MemoryBudget, facts_from_gguf
from engine.fit.budget import DeviceBudget
from engine.fit.plan import plan_gguf
from engine.worker.supervisor import free_port
from tests.engine.fit.tiny_moe import EXPERT_FF, EXPERTS, GGUF_PATH, HIDDEN, LAYERS

GIB = 1024**3


@pytest.fixture(scope="module")
def moe():
    return facts_from_gguf(GGUF_PATH)


def _budget(gpu_bytes: int) -> MemoryBudget:
    return MemoryBudget(ram=DeviceBudget("cpu", "RAM", 64 * GIB), gpus=(DeviceBudget("gpu0", "Test GPU", gpu_bytes),), gpu_offload=True)


def _gpu(plan):
    (gpu,) = [d for d in plan.devices if d.device != "cpu"]
    return gpu


def _cpu(plan):
    (cpu,) = [d for d in plan.devices if d.device == "cpu"]
    return cpu


def test_the_experts_are_read_per_layer_from_the_tensor_table(moe, starter_path):
    assert moe.layers == LAYERS and len(moe.expert_bytes) == LAYERS and len(set(moe.expert_bytes)) == 1
    per_expert_layer = 3 * EXPERTS * HIDDEN * EXPERT_FF * 34 // 32  # up, gate, down; q8_0: 34 bytes per 32 weights
    assert moe.expert_bytes[0] == per_expert_layer and all(e < w for e, w in zip(moe.expert_bytes, moe.layer_bytes, strict=True))
    assert facts_from_gguf(starter_path).expert_bytes == ()  # a dense model has none


def test_experts_go_to_the_cpu_until_every_layer_fits_the_gpu(moe):
    kw = dict(n_ctx=512, n_seq=1, kv_type="f16")
    whole = plan_gguf(moe, _budget(64 * GIB), **kw)  # room for all of it: nothing stays behind
    assert whole.fits and whole.gpu_layers == LAYERS and whole.cpu_moe == 0
    need = _gpu(whole).memory.total
    for held in (1, 3):  # a GPU short by a little more than 1 (then 3) layers' experts
        room = need - held * moe.expert_bytes[0] + 1
        plan = plan_gguf(moe, _budget(room), **kw)
        assert plan.fits and plan.gpu_layers == LAYERS and plan.cpu_moe == held, plan.reason
        assert "fits with experts on the CPU" in plan.reason and f"first {held} of {LAYERS} layers" in plan.reason
        assert "MoE experts (those of" in plan.describe()
        assert _gpu(plan).memory.total <= room
        assert _cpu(plan).memory.weights == _cpu(whole).memory.weights + held * moe.expert_bytes[0]  # they moved to RAM
        assert plan.to_dict()["cpu_moe"] == held
        fewer = plan_gguf(moe, _budget(room), cpu_moe=held - 1, gpu_layers=LAYERS, **kw)  # one layer's fewer: no room
        assert not fewer.fits and not _gpu(fewer).fits
    all_experts = plan_gguf(moe, _budget(64 * GIB), cpu_moe=-1, **kw)  # asked: every layer's
    assert all_experts.cpu_moe == LAYERS and "every layer's" in all_experts.describe()
    assert _gpu(whole).memory.weights - _gpu(all_experts).memory.weights == sum(moe.expert_bytes)


def test_a_dense_model_short_of_gpu_memory_offloads_fewer_layers_instead(starter_path):
    dense = facts_from_gguf(starter_path)
    whole = plan_gguf(dense, _budget(64 * GIB), n_ctx=512, n_seq=1, kv_type="f16")
    short = _gpu(whole).memory.total - _gpu(whole).memory.weights // 2  # half its layers' room
    plan = plan_gguf(dense, _budget(short), n_ctx=512, n_seq=1, kv_type="f16")
    assert plan.fits and plan.cpu_moe == 0 and 0 < plan.gpu_layers < dense.layers


def test_the_plan_for_the_moe_model_is_within_ten_percent_of_the_workers_resident_memory():
    """A worker serving the MoE model (on the CPU here): its plan against its resident memory once it answered."""
    port = free_port()
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(port), "--model", str(GGUF_PATH), "--ctx", "2048",
           "--parallel", "2", "--threads", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.2)
        name = GGUF_PATH.stem  # the name a model served by its path gets
        reply = httpx.post(f"{base}/v1/completions", timeout=120,
                           json={"model": name, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})  # fmt: skip
        assert reply.status_code == 200, reply.text
        loaded = httpx.get(f"{base}/api/stats", timeout=10).json()["models"]
        assert list(loaded) == [name]  # the MoE model alone
        plan = loaded[name]["load_plan"]
        rss = psutil.Process(proc.pid).memory_info().rss
    finally:
        proc.terminate()
        proc.wait(30)
    predicted = plan["memory"]["total_bytes"]
    assert plan["parallel"] == 2 and plan["n_ctx"] == 2048
    assert abs(predicted - rss) <= 0.10 * rss, (predicted, rss)


def test_experts_kept_on_the_cpu_by_tensor_overrides_answer_as_without():
    """llama.cpp takes the overrides (every layer's experts, or the first two layers') and answers the same."""
    from engine.backends.base import LlamaCppOptions, LoadOptions, ModelSpec
    from engine.backends.llamacpp import LlamaCppBackend
    from engine.types import GenerationRequest, SamplingParams

    answers = {}
    for cpu_moe in (None, -1, 2):
        backend = LlamaCppBackend()
        try:
            backend.load(ModelSpec(name="moe", path=GGUF_PATH),
                         LoadOptions(n_ctx=256, n_seq_max=1, n_threads=1, llamacpp=LlamaCppOptions(cpu_moe=cpu_moe)))  # fmt: skip
            request = GenerationRequest(model="moe", prompt="Once upon a time", params=SamplingParams(temperature=0, max_tokens=6))
            answers[cpu_moe] = "".join(c.text for c in backend.stream(request))
        finally:
            backend.close()
    assert answers[None].strip() and answers[-1] == answers[None] == answers[2]
