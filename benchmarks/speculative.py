"""Speculative decoding: Hearth with prompt lookup against Hearth without it, in one run, on one worker.

A real `hearth serve` with the starter model (2 threads, one slot, greedy, 256 tokens unless told). Each
prompt is sent with `"speculative": false` and `true`, alternately, three times each; the figure is
the median tokens per second of each side and their ratio. Prompts:

- grounded: rewrite a given code block of about 300 tokens with one rename; copy a given text;
  and the same copy with OpenAI's `prediction` set to the text;
- free: a story, where the output repeats little of its input.

It also checks that the answers are the same with and without speculation. A batch of rows rounds
differently from one row on several threads, so an answer may part from the plain one at a near-tie:
each such place is reported with the plain run's gap between its two best tokens (in log-probability),
and the answers are compared up to it.

With ``--draft MODEL`` (a registered name or a .gguf path), a second worker runs with ``--speculative
draft:MODEL`` and each prompt gets a row more: the draft model's drafts against plain decoding in that worker.
On a small CPU a draft that costs as much as the target (the starter as its own draft) is slower than plain
decoding even when every drafted token is kept: the figure says what a draft model costs here.

The timed requests ask for no logprobs (they cost each token time that llama-server's requests are not asked
for); one more request a side, untimed, gives the answers token by token with the plain run's two best.

With ``--llama-server PATH`` (a llama-server built from the same llama.cpp, see benchmarks/peers.md),
the same prompts run on it with no speculation and with each ``--spec-type`` given (default
``ngram-map-k``), as `/completion` with the same rendered prompt, each request alternating with Hearth's
speculative one (the same minute of a drifting machine for both), and its tokens per second are printed
beside Hearth's, with whether its answer is its plain one.

    .venv/bin/python benchmarks/speculative.py [--tokens 256] [--threads 2] [--draft MODEL] [--llama-server PATH]
        [--backend llamacpp|mlx]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

MODEL = "smollm2-135m-instruct"
KEY = "speculative-bench-key"

CODE = '''import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Download:
    repo: str
    variant: str
    path: Path
    bytes_done: int = 0
    bytes_total: int = 0

    @property
    def fraction(self) -> float:
        if not self.bytes_total:
            return 0.0
        return self.bytes_done / self.bytes_total

    def to_json(self) -> str:
        return json.dumps({"repo": self.repo, "variant": self.variant, "path": str(self.path),
                           "bytes_done": self.bytes_done, "bytes_total": self.bytes_total})


def load_downloads(folder: Path) -> list[Download]:
    downloads = []
    for file in sorted(folder.glob("*.json")):
        data = json.loads(file.read_text())
        downloads.append(Download(data["repo"], data["variant"], Path(data["path"]),
                                  data.get("bytes_done", 0), data.get("bytes_total", 0)))
    return downloads


def unfinished(downloads: list[Download]) -> list[Download]:
    return [d for d in downloads if d.bytes_done < d.bytes_total]
'''
TEXT = (
    "The lighthouse stood at the end of the harbour wall, white against the grey sea. Every evening the keeper "
    "climbed the hundred and twelve steps to light the lamp, and every morning he climbed them again to put it out. "
    "Ships passed in the night and never knew his name, but they knew the light, and that was enough for him. "
    "In winter the storms came from the west and the waves broke over the wall, and the keeper listened to the "
    "wind in the gallery and wrote in his log the time, the weather and the ships he had seen. In summer the "
    "children of the town came to ask him about the sea, and he told them what the sea had told him."
)
PROMPTS = {
    "rewrite code (rename)": ("grounded", f"Rewrite this code, renaming the class Download to Transfer everywhere. "
                              f"Change nothing else.\n\n{CODE}", None),
    "copy text": ("grounded", f"Copy this text exactly:\n\n{TEXT}", None),
    "copy text, prediction": ("grounded", f"Copy this text exactly:\n\n{TEXT}", TEXT),
    "story (free text)": ("free", "Write a long story about a fox who learns to sail.", None),
}


class Worker:
    """A `hearth serve` in a fresh HEARTH_HOME, on ``backend`` (llamacpp, mlx, or paged for benchmarks/paged_speculative.py)."""

    def __init__(self, threads: int, ctx: int, speculative: str = "auto", backend: str = "llamacpp") -> None:
        from engine.worker.net import free_port

        self.home = Path(tempfile.mkdtemp(prefix="hearth-spec-"))
        self.port = free_port()
        env = {**os.environ, "HEARTH_HOME": str(self.home), "HEARTH_API_KEY": KEY}
        cmd = [
            sys.executable, "-m", "engine.cli", "serve", "--port", str(self.port), "--model", MODEL,
            "--backend", backend, "--parallel", "1", "--ctx", str(ctx), "--threads", str(threads),
            "--speculative", speculative,
        ]  # fmt: skip
        self.log = open(self.home / "worker.log", "wb")  # noqa: SIM115 - open for the worker's life
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"speculative: the worker exited; see {self.home / 'worker.log'}")
            try:
                with self.client() as c:
                    if c.get("/health").status_code == 200:
                        return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit("speculative: the worker did not become ready in 300 s")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {KEY}"}, timeout=1800)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


def generate(c: httpx.Client, prompt: str, tokens: int, *, speculative: bool, prediction: str | None, logprobs: bool = False) -> dict:
    body: dict = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens, "temperature": 0}
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 2}
    # Asked either way: the default `auto` drafts no greedy request that does not ask (its answers stay plain).
    body["speculative"] = speculative
    if prediction:
        body["prediction"] = {"type": "content", "content": prediction}
    t0 = time.perf_counter()
    r = c.post("/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    data = r.json()
    data["_seconds"] = elapsed
    return data


def divergence(plain: dict, drafted: dict) -> tuple[int, float] | None:
    """Where the answers part (token index) and the plain run's gap between its two best there; None if never."""
    a = plain["choices"][0]["logprobs"]["content"]
    b = drafted["choices"][0]["logprobs"]["content"]
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x["token"] != y["token"]:
            top = x["top_logprobs"]
            gap = top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("inf")
            return i, gap
    return None if len(a) == len(b) else (min(len(a), len(b)), float("inf"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256, help="tokens per answer (default 256)")
    parser.add_argument("--threads", type=int, default=2, help="threads (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side per prompt (default 3)")
    parser.add_argument("--llama-server", type=Path, help="also time this llama-server binary")
    parser.add_argument("--spec-type", action="append", default=None, help="llama-server --spec-type (repeatable)")
    parser.add_argument("--draft", metavar="MODEL", help="also time a draft model (a registered name or a .gguf path)")
    parser.add_argument("--backend", choices=("llamacpp", "mlx"), default="llamacpp",
                        help="the worker's backend (default llamacpp; the paged engine has benchmarks/paged_speculative.py)")
    args = parser.parse_args(argv)

    worker = Worker(args.threads, ctx=2048, backend=args.backend)
    try:
        rows = measure(worker, args, PROMPTS, close=False)
        peers = llama_server_rows(args, worker) if args.llama_server else []
    finally:
        worker.close()
    if args.draft:
        drafts = {f"{name} [draft]": p for name, p in PROMPTS.items() if p[2] is None}  # a prediction drafts by lookup
        rows += measure(Worker(args.threads, ctx=2048, speculative=f"draft:{args.draft}"), args, drafts)

    print(f"Hearth ({args.backend}), starter model, {args.threads} threads, greedy, {args.tokens} tokens, median of {args.rounds}:")
    print(f"{'prompt':30} {'plain tok/s':>11} {'spec tok/s':>11} {'ratio':>6} {'drafted':>8} {'kept':>6}  same answer")
    for r in rows:
        same = "yes" if r["divergence"] is None else f"to token {r['divergence'][0]} (near-tie, gap {r['divergence'][1]:.3f})"
        print(
            f"{r['prompt']:30} {r['plain']:11.1f} {r['speculative']:11.1f} {r['speculative'] / r['plain']:6.2f}"
            f" {r['drafted']:8d} {r['accepted']:6d}  {same}"
        )
    if peers:
        print(f"\nllama-server ({args.llama_server}) on the same prompts, alternating with Hearth's speculative run in each "
              f"round (median of {args.rounds}):")
        print(f"  {'--spec-type':12} {'prompt':28} {'tok/s':>8} {'Hearth':>8} {'Hearth / it':>11}  same answer as its plain one")
        for p in peers:
            same = "" if p["same"] is None else ("yes" if p["same"] else "no")
            print(f"  {p['spec']:12} {p['prompt']:28} {p['tps']:8.1f} {p['hearth']:8.1f} {p['hearth'] / p['tps']:11.2f}  {same}")
    return 0


def measure(worker: Worker, args, prompts: dict, *, close: bool = True) -> list[dict]:
    """Each prompt with speculation and without it, alternately, on ``worker`` (closed at the end unless not ``close``)."""
    rows = []
    try:
        with worker.client() as c:
            generate(c, "Hello.", 8, speculative=False, prediction=None)  # warm up
            for name, (kind, prompt, prediction) in prompts.items():
                plain_tps, spec_tps, plain, drafted = [], [], None, None
                generate(c, prompt, 8, speculative=False, prediction=None)  # the prompt in the prefix cache for both
                for _ in range(args.rounds):
                    for speculative in (False, True):
                        out = generate(c, prompt, args.tokens, speculative=speculative, prediction=prediction)
                        tps = out["usage"]["completion_tokens"] / out["_seconds"]
                        (spec_tps if speculative else plain_tps).append(tps)
                        if speculative:
                            drafted = out
                        else:
                            plain = out
                assert plain is not None and drafted is not None
                # the answers compared token by token (with the plain run's two best at each), untimed: logprobs cost
                # both sides time per token that llama-server's rows below are not asked for
                plain_lp = generate(c, prompt, args.tokens, speculative=False, prediction=prediction, logprobs=True)
                drafted_lp = generate(c, prompt, args.tokens, speculative=True, prediction=prediction, logprobs=True)
                details = drafted["usage"].get("completion_tokens_details") or {}
                accepted = details.get("accepted_prediction_tokens", 0)
                rejected = details.get("rejected_prediction_tokens", 0)
                rows.append({
                    "prompt": name, "kind": kind, "plain": statistics.median(plain_tps),
                    "speculative": statistics.median(spec_tps), "accepted": accepted, "drafted": accepted + rejected,
                    "tokens": drafted["usage"]["completion_tokens"], "divergence": divergence(plain_lp, drafted_lp),
                    "same_text": plain["choices"][0]["message"]["content"] == drafted["choices"][0]["message"]["content"],
                })  # fmt: skip
    finally:
        if close:
            worker.close()
    return rows


def llama_server_rows(args, worker: Worker) -> list[dict]:
    """llama-server on the same prompts (its /completion with the chat rendered by Hearth's template), plain and
    with each ``--spec-type``, each request alternating with Hearth's speculative one on ``worker``."""
    from engine.backends.llamacpp.model import GGUFModel
    from engine.starter import starter_model_path
    from engine.types import ChatMessage
    from engine.worker.net import free_port

    model = GGUFModel(starter_model_path())
    rendered = {name: model.chat_template.render((ChatMessage("user", p),), add_generation_prompt=True) for name, (_, p, _) in PROMPTS.items()}
    model.close()
    out: list[dict] = []
    plain_text: dict[str, str] = {}
    for spec in [None, *(args.spec_type or ["ngram-map-k"])]:
        port = free_port()
        cmd = [str(args.llama_server), "-m", str(starter_model_path()), "--port", str(port), "-t", str(args.threads),
               "-c", "2048", "-np", "1", "--no-webui"]  # fmt: skip
        if spec:
            cmd += ["--spec-type", spec]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
            with worker.client() as c:
                for name, (_, prompt, prediction) in PROMPTS.items():
                    body = {"prompt": rendered[name], "n_predict": args.tokens, "temperature": 0, "cache_prompt": True}
                    httpx.post(f"http://127.0.0.1:{port}/completion", json={**body, "n_predict": 1}, timeout=900)  # cached
                    theirs, ours, text = [], [], ""
                    for _ in range(args.rounds):
                        t0 = time.perf_counter()
                        data = httpx.post(f"http://127.0.0.1:{port}/completion", json=body, timeout=900).json()
                        theirs.append(data.get("tokens_predicted", 0) / (time.perf_counter() - t0))
                        text = data.get("content", "")
                        mine = generate(c, prompt, args.tokens, speculative=True, prediction=prediction)
                        ours.append(mine["usage"]["completion_tokens"] / mine["_seconds"])
                    if spec is None:
                        plain_text[name] = text
                    out.append({
                        "spec": spec or "plain", "prompt": name, "tps": statistics.median(theirs),
                        "hearth": statistics.median(ours), "same": None if spec is None else text == plain_text.get(name),
                    })  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(10)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
