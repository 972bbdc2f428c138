"""Which format should the starter ship in? Speed and quality of the starter re-quantized, against its Q4_1 file.

Each format is made from the starter's Q4_1 file with llama.cpp's quantizer (re-quantizing loses a little more than
quantizing from 16 bits would, so the quality figures are a floor), then, alternating format by format:

- speed, on one thread by its CPU time (other programs on the machine do not change it): a decoded token, and a
  block of 64 prompt rows; and what the speed model predicts for the loop's threads from the probe's figures;
- quality on a fixed text (README.md and docs/fit.md, the first 1,024 tokens): perplexity, and how often the
  format's most likely next token is the Q4_1 file's (top-1 agreement).

    .venv/bin/python benchmarks/starter_formats.py [--dir /tmp/starter-formats] [--rounds 5]

The starter changes format only for a clear gain: decode at least 1.15x and prompts at least 3x Q4_1's, perplexity
within 3% of it, and a file within 10% of its size.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fit_models import requantize  # noqa: E402

FORMATS = ("Q4_0", "IQ4_NL", "Q4_K_M", "Q8_0")
TEXT_TOKENS = 1024
ROOT = Path(__file__).resolve().parent.parent


def fixed_text() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8") + "\n" + (ROOT / "docs" / "fit.md").read_text(encoding="utf-8")


class Loaded:
    def __init__(self, path: Path) -> None:
        import llama_cpp

        self.path = path
        self.llm = llama_cpp.Llama(str(path), n_ctx=TEXT_TOKENS, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1,
                                   logits_all=True, verbose=False)  # fmt: skip

    def decode_seconds(self, tokens: int = 16) -> float:
        self.llm.reset()
        self.llm.eval([1, 2])
        times = []
        for _ in range(tokens):
            start = time.thread_time()
            self.llm.eval([5])
            times.append(time.thread_time() - start)
        return statistics.median(times)

    def prompt_seconds(self, rows: int = 64) -> float:
        self.llm.reset()
        start = time.thread_time()
        self.llm.eval([5] * rows)
        return (time.thread_time() - start) / rows

    def logits(self, tokens: list[int]):
        import numpy as np

        self.llm.reset()
        self.llm.eval(tokens)
        return np.array(self.llm.scores[: len(tokens)], dtype=np.float32)

    def close(self) -> None:
        self.llm.close()


def quality(logits, tokens: list[int], reference) -> tuple[float, float]:
    """Perplexity of ``tokens`` under ``logits``, and the share of positions whose top token is ``reference``'s."""
    import numpy as np

    shifted = logits[:-1] - logits[:-1].max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    nll = -logp[np.arange(len(tokens) - 1), tokens[1:]]
    agree = float((logits.argmax(axis=1) == reference.argmax(axis=1)).mean())
    return math.exp(float(nll.mean())), agree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "hearth-starter-formats")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from engine.fit.facts import facts_from_gguf
    from engine.fit.probe import probe_machine
    from engine.fit.speed import estimate_speed
    from engine.hardware import detect_hardware
    from engine.starter import starter_model_path

    args.dir.mkdir(parents=True, exist_ok=True)
    paths = {"Q4_1": starter_model_path()}
    for f in FORMATS:
        paths[f] = args.dir / f"starter.{f}.gguf"
        if not paths[f].exists():
            print(f"re-quantizing the starter to {f} ...", flush=True)
            requantize(paths["Q4_1"], paths[f], f)
    machine = probe_machine(detect_hardware())
    models = {name: Loaded(p) for name, p in paths.items()}
    tokens = models["Q4_1"].llm.tokenize(fixed_text().encode())[:TEXT_TOKENS]
    decode: dict[str, list[float]] = {n: [] for n in models}
    prompt: dict[str, list[float]] = {n: [] for n in models}
    for _ in range(args.rounds):  # format by format, round by round
        for name, m in models.items():
            decode[name].append(m.decode_seconds())
            prompt[name].append(m.prompt_seconds())
    reference = models["Q4_1"].logits(tokens)
    rows = []
    for name, m in models.items():
        ppl, agree = quality(m.logits(tokens), tokens, reference)
        est = estimate_speed(facts_from_gguf(paths[name]), machine, depth=64)
        rows.append((name, paths[name].stat().st_size, min(decode[name]), min(prompt[name]), ppl, agree, est))
        m.close()
    base = rows[0]
    print(f"\nOn one thread by CPU time ({args.rounds} rounds, the fastest kept); predicted: the speed model for the "
          f"loop's threads; quality on {len(tokens)} tokens of README.md + docs/fit.md\n")  # fmt: skip
    print("| format | size | vs Q4_1 | decode tok/s (1 thread) | vs Q4_1 | prompt tok/s (1 thread) | vs Q4_1 | "
          "predicted decode / prompt (2 threads) | perplexity | vs Q4_1 | top-1 agreement |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, size, d, p, ppl, agree, est in rows:
        print(f"| {name} | {size / 2**20:.0f} MiB | {size / base[1]:.2f}x | {1 / d:.0f} | {base[2] / d:.2f}x | {1 / p:.0f} | "
              f"{base[3] / p:.2f}x | {est.decode_tok_s:.0f} / {est.prompt_tok_s:.0f} | {ppl:.2f} | {ppl / base[4] - 1:+.1%} | "
              f"{agree:.1%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
