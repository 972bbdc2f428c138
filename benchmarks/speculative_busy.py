"""The default speculation (``--speculative auto``) against none (``--speculative off``), quiet and busy, in one run.

Two `hearth serve` with the starter model (llama.cpp, --threads 2, one slot): one with the default ``auto``, one
with ``off``. Each request is sent as a client sends it (no ``speculative`` field), to both servers alternately,
greedy and sampled (temperature 0.7, a seed), on the grounded prompts of benchmarks/speculative.py (rewrite a code
block, copy a text, the same copy with OpenAI's ``prediction``) and a free story. A round times every prompt on
both servers with the machine quiet, then again while a ``python -c "while True: pass"`` process keeps one core
busy (started --settle seconds before). Decode speed is the tokens after the first over the time after the first,
streamed.

Printed per condition and temperature: the median ratio auto / off over the prompts and rounds, the drafted and
kept tokens ``auto`` reported, and whether each answer was the same text on both servers.

Goal (issue 44): with default flags, grounded prompts give the same answers as ``off`` and never run slower than
0.97x ``off``, quiet or busy.

    .venv/bin/python benchmarks/speculative_busy.py [--rounds 2] [--tokens 256] [--settle 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speculative import MODEL, PROMPTS, Worker  # noqa: E402


def timed(worker: Worker, prompt: str, prediction: str | None, tokens: int, temperature: float) -> dict:
    """One streamed answer: its text, decode tokens/s, and the drafts its usage reports."""
    body: dict = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
                  "temperature": temperature, "seed": 7, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    if prediction:
        body["prediction"] = {"type": "content", "content": prediction}
    text, first, usage = "", None, None
    with worker.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage = data["usage"]
            for choice in data.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece and first is None:
                    first = time.perf_counter()
                text += piece
    end = time.perf_counter()
    n = usage["completion_tokens"] if usage else 0
    details = (usage or {}).get("completion_tokens_details") or {}
    kept = details.get("accepted_prediction_tokens") or 0
    return {"text": text, "tokens": n, "tps": (n - 1) / (end - first) if first and n > 1 else 0.0,
            "drafted": kept + (details.get("rejected_prediction_tokens") or 0), "kept": kept}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per answer (default 256)")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds the busy process runs before timing (default 3)")
    args = ap.parse_args(argv)

    auto, off = Worker(2, 2048, "auto"), Worker(2, 2048, "off")
    rows: list[dict] = []
    try:
        for w in (auto, off):  # loaded and warm before anything is timed
            timed(w, "Say hello.", None, 8, 0.0)
        for r in range(args.rounds):
            for condition in ("quiet", "busy"):
                burner = None
                if condition == "busy":
                    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    time.sleep(args.settle)
                try:
                    for temperature in (0.0, 0.7):
                        for name, (kind, prompt, prediction) in PROMPTS.items():
                            order = (auto, off) if r % 2 == 0 else (off, auto)
                            got = {("auto" if w is auto else "off"): timed(w, prompt, prediction, args.tokens, temperature) for w in order}
                            a, o = got["auto"], got["off"]
                            row = {"round": r + 1, "condition": condition, "temperature": temperature, "prompt": name,
                                   "kind": kind, "auto_tps": round(a["tps"], 1), "off_tps": round(o["tps"], 1),
                                   "ratio": round(a["tps"] / o["tps"], 3) if o["tps"] else None, "drafted": a["drafted"],
                                   "kept": a["kept"], "same_answer": a["text"] == o["text"]}  # fmt: skip
                            rows.append(row)
                            print(json.dumps(row), flush=True)
                finally:
                    if burner is not None:
                        burner.kill()
                        burner.wait()
    finally:
        auto.close()
        off.close()
    print("\ncondition  temperature  prompts   auto/off (median, min)  drafted/kept  same answers", file=sys.stderr)
    for condition in ("quiet", "busy"):
        for temperature in (0.0, 0.7):
            for kind in ("grounded", "free"):
                sel = [x for x in rows if x["condition"] == condition and x["temperature"] == temperature and x["kind"] == kind]
                ratios = [x["ratio"] for x in sel if x["ratio"]]
                if not ratios:
                    continue
                print(f"{condition:<10} {temperature:<12} {kind:<9} {statistics.median(ratios):.3f}x, {min(ratios):.3f}x"
                      f"{'':<10} {sum(x['drafted'] for x in sel)}/{sum(x['kept'] for x in sel)}"
                      f"{'':<8} {sum(x['same_answer'] for x in sel)}/{len(sel)}", file=sys.stderr)  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
