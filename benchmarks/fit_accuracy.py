"""Predicted against measured memory of a real worker, for the one memory model (engine/fit).

Each case starts `hearth serve --model PATH --ctx N --parallel P --kv-type T` in a process of its
own, waits for the model, runs one completion (so every weight page has been read), then reads
the worker's resident memory and compares it with the plan the worker made (`/api/stats`, its
`load_plan`). Models: the starter (SmolLM2-135M, Q4_1) and random-weight GGUF files of
Llama-3.2-1B's and Qwen2.5-0.5B's shapes written with the `gguf` library (benchmarks/fit_models.py).

    .venv/bin/python benchmarks/fit_accuracy.py [--quick] [--dir /tmp/fit-models]

It also measures the idle worker (no model), the runtime figure the model counts. Goal: every
case within +-15%.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fit_models import LLAMA_1B, QWEN_05B, write_random_gguf  # noqa: E402

MIB = 1024**2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc: subprocess.Popen, base: str, timeout: float) -> None:
    """Wait until the worker at ``base`` answers /health (its --model loaded by then)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the worker did not become ready")
        time.sleep(0.3)


@contextlib.contextmanager
def serving(args: list[str], home: Path, timeout: float) -> Iterator[tuple[subprocess.Popen, str]]:
    """A worker (`hearth serve ARGS` with ``home`` as its data folder) on a free loopback port, ready: its
    process and base URL; stopped on leaving."""
    port = free_port()
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(port), *args]
    env = {**os.environ, "HEARTH_HOME": str(home)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, base, timeout)
        yield proc, base
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_worker(args: list[str], home: Path, *, model: str | None, timeout: float = 300) -> dict:
    """Start a worker, wait for it (and its model), run one completion, and measure it."""
    with serving(args, home, timeout) as (proc, base):
        plan = None
        if model is not None:
            # the name `--model PATH` loaded it under (over HTTP a model is named, never given by its path)
            model = next(iter(httpx.get(f"{base}/api/stats", timeout=10).json()["models"]))
            r = httpx.post(
                f"{base}/v1/completions",
                json={"model": model, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0},
                timeout=timeout,
            )
            r.raise_for_status()
            stats = httpx.get(f"{base}/api/stats", timeout=10).json()
            plan = next(iter(stats["models"].values()))["load_plan"]
        time.sleep(0.5)
        rss = psutil.Process(proc.pid).memory_info().rss
        return {"rss": rss, "plan": plan}


def cases(models: dict[str, Path], quick: bool) -> list[tuple[str, Path, int, int, str]]:
    out = [
        ("starter", models["starter"], 4096, 16, "f16"),  # the defaults the app starts with
        ("starter", models["starter"], 4096, 1, "f16"),
        ("starter", models["starter"], 4096, 4, "f16"),
        ("starter", models["starter"], 8192, 4, "q8_0"),
        ("starter", models["starter"], 2048, 8, "q4_0"),
        ("qwen-0.5b", models["qwen-0.5b"], 4096, 1, "f16"),
        ("qwen-0.5b", models["qwen-0.5b"], 8192, 8, "f16"),
        ("qwen-0.5b", models["qwen-0.5b"], 16384, 4, "q8_0"),
        ("llama-1b", models["llama-1b"], 4096, 1, "f16"),
        ("llama-1b", models["llama-1b"], 4096, 16, "q8_0"),
        ("llama-1b", models["llama-1b"], 32768, 2, "q4_0"),
        ("llama-1b", models["llama-1b"], 8192, 4, "f16"),
    ]
    return out[:1] + out[5:6] + out[8:9] if quick else out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "hearth-fit-models")
    parser.add_argument("--quick", action="store_true", help="three cases only")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    from engine.starter import starter_model_path

    args.dir.mkdir(parents=True, exist_ok=True)
    models = {"starter": starter_model_path()}
    for shape in (QWEN_05B, LLAMA_1B):
        path = args.dir / f"{shape.name}.gguf"
        if not path.exists():
            print(f"writing {path} ...", flush=True)
            write_random_gguf(path, shape)
        models[shape.name] = path
    rows = []
    with tempfile.TemporaryDirectory() as home:
        idle = run_worker([], Path(home), model=None)["rss"]
        print(f"idle worker (no model): {idle / MIB:.0f} MiB resident")
        print(f"{'model':<10} {'ctx':>6} {'slots':>5} {'kv':>5}  {'predicted':>10} {'measured':>10}  {'error':>6}")
        for name, path, ctx, slots, kv in cases(models, args.quick):
            got = run_worker(
                ["--model", str(path), "--ctx", str(ctx), "--parallel", str(slots), "--kv-type", kv],
                Path(home),
                model=str(path),
            )
            predicted = got["plan"]["memory"]["total_bytes"]
            err = (predicted - got["rss"]) / got["rss"]
            rows.append({"model": name, "ctx": ctx, "slots": slots, "kv_type": kv, "predicted": predicted,
                         "measured": got["rss"], "error": err, "plan": got["plan"]})  # fmt: skip
            print(
                f"{name:<10} {ctx:>6} {slots:>5} {kv:>5}  {predicted / MIB:>8.0f} MiB {got['rss'] / MIB:>6.0f} MiB"
                f"  {err * 100:>+5.1f}%",
                flush=True,
            )
    worst = max(abs(r["error"]) for r in rows)
    print(f"worst error {worst * 100:.1f}% over {len(rows)} cases (goal: within 15%)")
    if args.json:
        args.json.write_text(json.dumps({"idle_rss": idle, "cases": rows}, indent=2))
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    raise SystemExit(main())
