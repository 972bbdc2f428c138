"""Predicted against measured speed, for the speed model (engine/fit/speed.py), both sides in one run.

For each case the speed model predicts from this machine's probe figures (measured first, in this run), then
`hearth bench` measures a real `hearth serve --model PATH --ctx C --parallel P --speculative off`:

- single-stream decode (1 / the median time per output token) and prompt reading (prompt tokens / the median
  time to the first token) at concurrency 1, with a prompt that puts the KV cache at the depth the case names;
- aggregate decode at 16 slots: output tokens per second of 16 requests kept in flight, predicted as the bench
  counts it (each request's prompt read, then its answer decoded with the others).

Models: the starter (SmolLM2-135M, Q4_1) and random-weight GGUF files written by benchmarks/fit_models.py
(Qwen2.5-0.5B's shape at Q8_0, Qwen2.5-1.5B's at Q4_K_M re-quantized by llama.cpp, a small MoE at Q8_0; these repeat
one 16-bit scale in every block), and Qwen3-1.7B's shape at Q4_K_M with a real model's spread of scales (the
recommended list's first chat suggestion on a 2-core machine: it should decode at 10 tok/s or more there).

    .venv/bin/python benchmarks/speed_accuracy.py [--quick] [--dir /tmp/speed-models] [--json out.json]

Other programs on the machine slow the measured side and not the prediction (the probe keeps its fastest
rounds): each case records the load average it ran under, and cases run twice, alternating, keeping the median.
Goals: decode within +-25%, prompt +-35%, 16-slot aggregate +-35%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fit_accuracy import serving  # noqa: E402
from fit_models import QWEN3_17B, QWEN_05B, QWEN_15B, SMALL_MOE, requantize, write_random_gguf  # noqa: E402

OUTPUT_TOKENS = 48


@dataclass(frozen=True)
class Case:
    model: str
    ctx: int
    words: int  # prompt length in the bench's random words
    slots: int = 1  # 16: the aggregate case


def build_models(folder: Path, names: set[str]) -> dict[str, Path]:
    from engine.starter import starter_model_path

    folder.mkdir(parents=True, exist_ok=True)
    models = {"starter": starter_model_path()}
    for shape in (QWEN_05B, SMALL_MOE):
        path = folder / f"{shape.name}.gguf"
        models[shape.name] = path
        if not path.exists() and shape.name in names:
            print(f"writing {path} ...", flush=True)
            write_random_gguf(path, shape)
    q4 = folder / "qwen-1.5b.Q4_K_M.gguf"
    if not q4.exists() and "qwen-1.5b" in names:
        src = folder / "qwen-1.5b-q8_0.gguf"
        if not src.exists():
            write_random_gguf(src, QWEN_15B)
        print(f"re-quantizing {src} to Q4_K_M ...", flush=True)
        requantize(src, q4, "Q4_K_M")
    models["qwen-1.5b"] = q4
    # the recommended list's first chat suggestion here, Qwen3-1.7B at Q4_K_M, with a real model's spread of scales
    q3 = folder / "qwen3-1.7b.Q4_K_M.gguf"
    if not q3.exists() and "qwen3-1.7b" in names:
        src = folder / "qwen3-1.7b-q8_0.gguf"
        if not src.exists():
            print(f"writing {src} ...", flush=True)
            write_random_gguf(src, QWEN3_17B, scale_spread=0.35)
        print(f"re-quantizing {src} to Q4_K_M ...", flush=True)
        requantize(src, q3, "Q4_K_M")
        src.unlink()
    models["qwen3-1.7b"] = q3
    return models


def bench(path: Path, case: Case, home: Path, out: Path) -> dict:
    """One `hearth bench` run of ``case`` against `hearth serve --model PATH ...`: its level's summary."""
    import httpx

    requests = 16 if case.slots > 1 else 2
    serve = ["--model", str(path), "--ctx", str(case.ctx), "--parallel", str(case.slots), "--speculative", "off"]
    with serving(serve, home, timeout=600) as (_, base):
        name = next(iter(httpx.get(f"{base}/api/stats", timeout=10).json()["models"]))
        cmd = [
            sys.executable, "-m", "engine.cli", "bench", "--url", f"{base}/v1", "--model", name,
            "--concurrency", str(case.slots), "--requests", str(requests), "--warmup", "1",
            "--input-len", f"fixed:{case.words}", "--output-len", f"fixed:{OUTPUT_TOKENS}", "--out", str(out), "--json",
        ]  # fmt: skip
        env = {**os.environ, "HEARTH_HOME": str(home)}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"hearth bench failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)["results"][0]


def cpu_time_case(path: Path, case: Case, home: Path) -> dict:
    """``case`` on one thread, by the worker's CPU time (what other programs on the machine do not change): seconds
    per decoded token at the case's depth, per prompt token, and with N streams per token of all of them."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    import psutil

    from engine.bench.workload import WORDS

    serve = ["--model", str(path), "--ctx", str(case.ctx), "--parallel", str(case.slots), "--speculative", "off",
             "--threads", "1"]  # fmt: skip
    rng = random.Random(case.words)
    with serving(serve, home, timeout=600) as (proc, base):
        name = next(iter(httpx.get(f"{base}/api/stats", timeout=10).json()["models"]))
        worker = psutil.Process(proc.pid)

        def cpu() -> float:
            t = worker.cpu_times()
            return t.user + t.system

        def text(words: int) -> str:  # the bench's words, drawn anew: no prompt shares a prefix with one before
            return " ".join(rng.choice(WORDS) for _ in range(words))

        def ask(prompt: str, n: int) -> int:
            body = {"model": name, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
            r = httpx.post(f"{base}/v1/completions", json=body, timeout=3600)
            r.raise_for_status()
            return int(r.json()["usage"]["prompt_tokens"])

        def measured(prompt: str, n: int) -> tuple[float, int]:
            start = cpu()
            tokens = ask(prompt, n)
            return cpu() - start, tokens

        ask(text(8), 4)
        out: dict = {}
        if case.slots > 1:
            def together(n: int) -> float:
                prompts = [text(case.words) for _ in range(case.slots)]
                start = cpu()
                with ThreadPoolExecutor(case.slots) as pool:
                    list(pool.map(lambda p: ask(p, n), prompts))
                return cpu() - start

            short, long = together(8), together(8 + OUTPUT_TOKENS)
            out["aggregate"] = case.slots * OUTPUT_TOKENS / max(1e-9, long - short)
            out["prompt_tokens"] = case.words
            return out
        small, small_tokens = measured(text(8), 1)
        big, big_tokens = measured(text(case.words), 1)
        per_prompt = (big - small) / max(1, big_tokens - small_tokens)
        # one prompt read once, then answered twice from the cache's prefix: the answers' CPU time differs by their
        # decoding alone (two prompts read afresh would differ by more than the decoding itself at depth)
        prompt = text(case.words)
        ask(prompt, 1)
        short, _ = measured(prompt, 8)
        long, _ = measured(prompt, 8 + OUTPUT_TOKENS)
        out.update(decode=OUTPUT_TOKENS / max(1e-9, long - short), prompt=1 / max(1e-9, per_prompt), prompt_tokens=big_tokens)
        return out


def predict(path: Path, case: Case, machine, prompt_tokens: int) -> dict:
    from engine.fit.budget import MemoryBudget
    from engine.fit.facts import facts_from_gguf
    from engine.fit.plan import plan_load
    from engine.fit.speed import estimate_speed
    from engine.hardware import detect_hardware

    facts = facts_from_gguf(path)
    plan = plan_load(facts, MemoryBudget.from_hardware(detect_hardware(), live=True), n_ctx=case.ctx, n_seq=case.slots)
    depth = prompt_tokens + OUTPUT_TOKENS // 2  # the cache's mean depth over the answer
    est = estimate_speed(facts, machine, plan=plan, depth=depth)
    out = {"decode": est.decode_tok_s, "prompt": est.prompt_tok_s, "bytes_per_token": est.bytes_per_token}
    if case.slots > 1:
        n = case.slots
        # as the bench counts it: n prompts read, then n answers decoded together
        seconds = n * prompt_tokens / est.prompt_tok_s + OUTPUT_TOKENS * n / est.aggregate(n)
        out["aggregate"] = n * OUTPUT_TOKENS / seconds
        out["aggregate_decode"] = est.aggregate(n)
    return out


def measured(summary: dict, case: Case) -> dict:
    tpot = summary["tpot_s"]["p50"]
    ttft = summary["ttft_s"]["p50"]
    prompt_tokens = summary["prompt_tokens_per_request"]["p50"] or 0
    out = {"decode": 1 / tpot if tpot else None, "prompt": prompt_tokens / ttft if ttft else None,
           "prompt_tokens": prompt_tokens}  # fmt: skip
    if case.slots > 1:
        out["aggregate"] = summary["output_throughput_tok_s"]
    return out


def cases(quick: bool) -> list[Case]:
    out = [
        Case("starter", 4096, 120), Case("starter", 4096, 1500), Case("starter", 4096, 16, slots=16),
        # the random models' made-up vocabulary spells English words in bytes: about 7 tokens a word
        Case("qwen-0.5b", 4096, 17), Case("qwen-0.5b", 4096, 214), Case("qwen-0.5b", 4096, 3, slots=16),
        Case("qwen-1.5b", 4096, 17), Case("moe-8x", 4096, 17), Case("qwen3-1.7b", 4096, 17),
        Case("starter", 32768, 5000),
    ]
    return [c for c in out if c.ctx <= 4096 and c.model in ("starter", "qwen-0.5b")] if quick else out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "hearth-speed-models")
    parser.add_argument("--quick", action="store_true", help="the starter and the 0.5B model, short contexts")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each case, alternating (median kept)")
    parser.add_argument("--only", help="run the cases of these models only (comma-separated)")
    parser.add_argument("--case", help="run this one case: MODEL,CTX,WORDS[,SLOTS] (e.g. starter,32768,5000)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one thread, by the worker's CPU time against the probe's one-thread figures (a busy "
                             "machine does not change it; the loop's thread scaling is not checked)")  # fmt: skip
    args = parser.parse_args()
    from engine.fit.probe import probe_machine
    from engine.hardware import detect_hardware

    todo = [c for c in cases(args.quick) if not args.only or c.model in args.only.split(",")]
    if args.case:
        model, ctx, words, *slots = args.case.split(",")
        todo = [Case(model, int(ctx), int(words), int(slots[0]) if slots else 1)]
    models = build_models(args.dir, {c.model for c in todo})
    machine = probe_machine(detect_hardware(), threads=1 if args.cpu_time else None)
    print(f"probe: memory {machine.cpu.bandwidth / 1e9:.1f} GB/s; " + ", ".join(
        f"{k.type} {k.decode_rate / 1e9:.0f} GB/s, {k.prompt_rate / 1e9:.0f} GFLOP/s" for k in machine.cpu.kernels), flush=True)  # fmt: skip
    runs: dict[Case, list[dict]] = {c: [] for c in todo}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):  # A B C ... A B C: a busy spell falls on every case alike
            for i, case in enumerate(todo):
                if args.cpu_time:
                    m = cpu_time_case(models[case.model], case, Path(tmp))
                else:
                    m = measured(bench(models[case.model], case, Path(tmp), Path(tmp) / f"out-{r}-{i}"), case)
                m["load"] = os.getloadavg()[0]
                runs[case].append(m)
                print(f"  run {r + 1}: {case} measured {m}", flush=True)
    rows = []
    print("\n| model | ctx | slots | prompt tokens | what | predicted | measured | error | load |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case, ms in runs.items():
        prompt_tokens = int(statistics.median(m["prompt_tokens"] for m in ms))
        pred = predict(models[case.model], case, machine, prompt_tokens)
        if args.cpu_time and case.slots > 1:
            pred["aggregate"] = pred["aggregate_decode"]  # by CPU time the answers' decoding alone is counted
        for what in (("aggregate",) if case.slots > 1 else ("decode", "prompt")):
            got = statistics.median(m[what] for m in ms if m.get(what))
            err = pred[what] / got - 1
            load = statistics.median(m["load"] for m in ms)
            rows.append({"model": case.model, "ctx": case.ctx, "slots": case.slots, "prompt_tokens": prompt_tokens,
                         "what": what, "predicted": pred[what], "measured": got, "error": err, "load": load})  # fmt: skip
            print(f"| {case.model} | {case.ctx:,} | {case.slots} | {prompt_tokens:,} | {what} tok/s | {pred[what]:.1f} "
                  f"| {got:.1f} | {err:+.0%} | {load:.1f} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"machine": machine.to_dict(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
