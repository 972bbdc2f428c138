"""The draft model's share of the memory model against a real worker: the starter model served plain, then with
itself as its draft (``--speculative draft:<starter>``), each answering one prompt longer than the draft's
catch-up block. The measured cost of the draft is the worker's resident memory with it less without it; the
predicted one is the plan's ``draft_bytes`` (/api/stats), which the worker's plan adds to the model's. Cases vary
the context and slots, which the draft's KV cache grows with.

    nice -n 19 .venv/bin/python benchmarks/fit_draft.py [--runs 2] [--model FILE.gguf]

Goal: within +-15% of the measured difference.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fit_accuracy import serving  # noqa: E402

from engine.starter import starter_model_path  # noqa: E402

MIB = 1024**2
CASES = ((1024, 1), (4096, 1), (4096, 4), (8192, 2))  # (context per slot, slots)
# The prompt: the first 400 tokens of these notes in the model's own tokenizer (about 400 again when tokenized
# anew): more than a catch-up block (256), so the draft computes a full micro-batch.
NOTES = "Summarize the following notes in one sentence.\n\n" + " ".join(
    f"Note {i}: the lighthouse keeper checked lamp {i}, logged the weather, and wound the clock." for i in range(60)
)
PROMPT_TOKENS = 400


def measure(home: Path, model: Path, *, n_ctx: int, n_seq: int, draft: Path | None, timeout: float = 300) -> dict:
    """Serve ``model`` (with ``draft``), answer one prompt, and read the worker's RSS and plan."""
    args = ["--model", str(model), "--ctx", str(n_ctx), "--parallel", str(n_seq), "--threads", "1"]
    args += ["--speculative", f"draft:{draft}" if draft is not None else "off"]
    with serving(args, home, timeout) as (proc, base):
        # the name --model loaded it under (a registered file keeps its registered name)
        name = next(iter(httpx.get(f"{base}/api/stats", timeout=10).json()["models"]))
        ids = httpx.post(f"{base}/tokenize", json={"model": name, "content": NOTES}, timeout=60).json()["tokens"]
        prompt = httpx.post(f"{base}/detokenize", json={"model": name, "tokens": ids[:PROMPT_TOKENS]}, timeout=60)
        r = httpx.post(f"{base}/v1/completions", timeout=timeout, json={  # a plain prompt: random models have no template
            "model": name, "prompt": prompt.json()["content"], "max_tokens": 16, "temperature": 0,
        })  # fmt: skip
        if r.status_code != 200:
            raise RuntimeError(f"the completion failed: {r.text[:500]}")
        models = httpx.get(f"{base}/api/stats", timeout=10).json()["models"]
        if list(models) != [name]:
            raise RuntimeError(f"the worker holds {list(models)}, not only {name}")
        stats = models[name]
        if draft is not None and not stats.get("draft_model"):
            raise RuntimeError(f"the draft model was not loaded: {stats.get('draft_model_refused')}")
        time.sleep(0.5)
        return {"rss": psutil.Process(proc.pid).memory_info().rss, "plan": stats["load_plan"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="workers per case; the median is taken")
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file to serve as its own draft (default: the starter)")
    args = parser.parse_args()
    model = args.model or starter_model_path()
    with tempfile.TemporaryDirectory() as home:

        def median(**kw) -> tuple[int, dict]:
            runs = sorted((measure(Path(home), model, **kw) for _ in range(args.runs)), key=lambda r: r["rss"])
            return runs[len(runs) // 2]["rss"], runs[0]["plan"]

        print(f"draft: {model.name} ({model.stat().st_size / MIB:.0f} MiB file), drafting for itself")
        print(f"{'context x slots':<16} {'plain':>9} {'with draft':>11} {'measured':>9} {'predicted':>10} {'ratio':>6}")
        for n_ctx, n_seq in CASES:
            plain, _ = median(n_ctx=n_ctx, n_seq=n_seq, draft=None)
            drafting, plan = median(n_ctx=n_ctx, n_seq=n_seq, draft=model)
            measured, predicted = drafting - plain, plan["draft_bytes"]
            ratio = predicted / measured if measured > 0 else float("nan")
            print(f"{n_ctx:>7,} x {n_seq:<6} {plain / MIB:>7.0f}MB {drafting / MIB:>9.0f}MB {measured / MIB:>7.1f}MB "
                  f"{predicted / MIB:>8.1f}MB {ratio:>6.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
