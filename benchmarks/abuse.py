"""Abuse: with each abusive request in flight, does a small chat still answer in time?

A real `hearth serve` with the starter model. First an 8-token greedy chat alone (the median of a few
runs). Then, for each abusive request below, the request is started, and while it is in flight (or
just after it was refused) the same chat is timed again:

- a JSON schema whose regex made the GBNF grammar explode (``^(a{0,50}){0,50}$``), through OpenAI's
  ``response_format`` and Ollama's ``format`` (refused: 400);
- a schema right at the limits (``^(a{0,5}b?){0,10}$``), accepted and generating meanwhile (its masks
  are the costliest the limits let in; the per-step grammar budget is the backstop);
- 6,000 embedding inputs whose client leaves after 1 s (refused: over the 2,048 cap);
- 2,048 embedding inputs (the cap), the client waiting for them;
- 2,048 embedding inputs whose client leaves after 1 s (the chat is timed after it left);
- 200,000 stop sequences (refused: over the cap of 16);
- an enum of 2,400 values sharing a prefix (refused: over the 1,000 values of a schema), and one of 1,000
  values sharing a prefix at the limits (1,000 values, 16 KB), accepted and generating meanwhile;
- one embedding input of the whole context on ``/v1/embeddings``, and one past it on Ollama's ``/api/embed``
  and ``/api/embeddings`` (cut to fit), each computed in slices between the decode steps;
- ``n`` = 4 answers of 256 tokens (every slot), and ``n`` = 8 (refused: over the slots);
- ``max_tokens`` 2^63, ignoring EOS (capped at the context, said in a header), its client leaving after 10 s;
- a recursive chat template: not reachable over HTTP (templates come only from model files, and a
  load refuses one that runs past its budget), so it is listed and skipped.

The goal: each chat within 3x its time alone (the median of three runs just before it, as the machine
may be shared), and the worker healthy (``/health`` 200) at the end.
Prints every figure, its ratio and whether the goal was met; exit status 0 when it was.

    .venv/bin/python benchmarks/abuse.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

MAIN = "smollm2-135m-instruct"
KEY = "abuse-key"
GOAL = 3.0
EXPLODING = {"type": "string", "pattern": "^(a{0,50}){0,50}$"}
AT_LIMIT = {"type": "string", "pattern": "^(a{0,5}b?){0,10}$"}  # accepted: the costliest shape within the limits
CHAT = {
    "model": MAIN,
    "messages": [{"role": "user", "content": "Count from one to ten."}],
    "temperature": 0,
    "max_tokens": 8,
    "ignore_eos": True,
}


class Worker:
    """A `hearth serve` in a fresh HEARTH_HOME."""

    def __init__(self, parallel: int, threads: int | None) -> None:
        from engine.worker.net import free_port

        self.home = Path(tempfile.mkdtemp(prefix="hearth-abuse-"))
        self.port = free_port()
        env = {**os.environ, "HEARTH_HOME": str(self.home), "HEARTH_API_KEY": KEY}
        cmd = [
            sys.executable, "-m", "engine.cli", "serve", "--port", str(self.port), "--model", MAIN,
            "--backend", "llamacpp", "--parallel", str(parallel), "--ctx", "2048",
        ]  # fmt: skip
        if threads:
            cmd += ["--threads", str(threads)]
        self.log = open(self.home / "worker.log", "wb")  # noqa: SIM115 - open for the worker's life
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 240
        with self.client() as c:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"abuse: the worker exited; see {self.home / 'worker.log'}")
                try:
                    if c.get("/health").status_code == 200 and c.post("/v1/chat/completions", json=CHAT).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        raise SystemExit("abuse: the worker did not become ready in 240 s")

    def client(self, timeout: float = 600) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {KEY}"}, timeout=timeout
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


def time_chat(worker: Worker) -> float:
    with worker.client() as c:
        t0 = time.perf_counter()
        r = c.post("/v1/chat/completions", json=CHAT)
        elapsed = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"the probe chat failed: HTTP {r.status_code} {r.text[:200]}")
    return elapsed


def post(path: str, body: dict, *, leave_after: float | None = None) -> Callable[[Worker, dict], None]:
    """An abusive request: posted, its status and time noted; with ``leave_after``, the client hangs up then."""

    def run(worker: Worker, note: dict) -> None:
        t0 = time.perf_counter()
        try:
            with worker.client(timeout=leave_after or 600) as c:
                r = c.post(path, json=body)
            note["status"] = r.status_code
            if r.status_code >= 400:
                note["error"] = r.json().get("error")
        except httpx.TimeoutException:
            note["status"] = "left"
        note["seconds"] = time.perf_counter() - t0

    return run


def enum_cases(schema_body: dict) -> list[tuple[str, Callable[[Worker, dict], None], float]]:
    """Enums of values sharing a prefix: each value a parse stack of llama.cpp's grammar while the output is in
    the prefix, unless the enum is written as a trie. 2,400 values (as many as fit the 64 KB a schema may have:
    over the 1,000 an enum may hold) and 1,000 (at the limits: 1,000 values, 16 KB)."""

    def fmt(values: list[str]) -> dict:
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": values}}}

    over = [f"a-shared-prefix-{i}" for i in range(2400)]
    at_limits = [f"shared-pr-{i:03d}" for i in range(1000)]
    # the value is about 8 tokens; max_tokens 64 keeps the request in flight while the chat is timed
    return [
        ("enum of 2,400 values sharing a prefix", post("/v1/chat/completions", {**schema_body, "response_format": fmt(over)}), 0.05),
        ("enum of 1,000 values at the limits", post("/v1/chat/completions", {**schema_body, "response_format": fmt(at_limits)}), 0.1),
    ]


def long_text(worker: Worker, tokens: int) -> str:
    """A text of at most ``tokens`` tokens on the worker's model (counted by its ``/tokenize``), close to it."""
    phrase = "the river {} runs past the old mill to the sea"
    words: list[str] = []
    with worker.client() as c:
        while True:
            more = [*words, *(phrase.format(i) for i in range(len(words), len(words) + 20))]
            n = len(c.post("/tokenize", json={"model": MAIN, "content": " ".join(more)}).json()["tokens"])
            if n > tokens - 2:  # BOS, and a margin for the joins
                return " ".join(words)
            words = more


def streamed(path: str, body: dict, *, leave_after: float) -> Callable[[Worker, dict], None]:
    """A streamed request read for ``leave_after`` seconds, then left; its status and the cap Hearth put on
    ``max_tokens`` (the X-Hearth-Max-Tokens-Cap header) noted."""

    def run(worker: Worker, note: dict) -> None:
        t0 = time.perf_counter()
        with worker.client() as c, c.stream("POST", path, json={**body, "stream": True}) as r:
            note["status"] = r.status_code
            cap = r.headers.get("x-hearth-max-tokens-cap")
            if cap:
                note["status"] = f"{r.status_code}, cap {cap}"
            for _ in r.iter_bytes():
                if time.perf_counter() - t0 > leave_after:
                    break
        note["seconds"] = time.perf_counter() - t0

    return run


def stall_cases(worker: Worker) -> list[tuple[str, Callable[[Worker, dict], None], float]]:
    """Requests that held the model for everyone: one embedding input as long as the context (every dialect
    that takes one; Ollama's cut a longer one to fit), as many long answers as slots in one request, more
    choices than slots, and a max_tokens of 2^63."""
    text = long_text(worker, 2048)
    past = text + " " + text  # Ollama's routes cut it to the context
    answers = {**CHAT, "max_tokens": 256, "messages": [{"role": "user", "content": "Write a long story."}]}
    return [
        ("one 2,048-token input, /v1/embeddings", post("/v1/embeddings", {"model": MAIN, "input": text},
                                                      leave_after=120), 1.0),
        ("one input past the context, /api/embed", post("/api/embed", {"model": MAIN, "input": past},
                                                        leave_after=120), 1.0),
        ("one input past the context, /api/embeddings", post("/api/embeddings", {"model": MAIN, "prompt": past},
                                                             leave_after=120), 1.0),
        ("n=4 (every slot), 256 tokens each", post("/v1/chat/completions", {**answers, "n": 4}), 0.5),
        ("n=8, over the 4 slots", post("/v1/chat/completions", {**answers, "n": 8}), 0.05),
        ("max_tokens 2^63, left after 10 s", streamed("/v1/chat/completions", {**CHAT, "max_tokens": 2**63},
                                                      leave_after=10), 0.5),
    ]  # fmt: skip


def abuse(worker: Worker, name: str, request: Callable[[Worker, dict], None], *, probe_after: float) -> dict:
    """Start ``request``, time the chat ``probe_after`` seconds later, then wait for the request to end."""
    note: dict = {"name": name}
    thread = threading.Thread(target=request, args=(worker, note), daemon=True)
    thread.start()
    time.sleep(probe_after)
    note["in_flight"] = thread.is_alive()
    note["chat"] = time_chat(worker)
    thread.join(600)
    return note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, default=4, help="slots of the worker (default 4)")
    parser.add_argument("--threads", type=int, default=None, help="threads of the worker (default: its own choice)")
    parser.add_argument("--solo-runs", type=int, default=5, help="runs of the chat alone (default 5)")
    parser.add_argument("--only", default="", help="run only the cases whose name holds this text (a rerun on a busy machine)")
    args = parser.parse_args(argv)

    worker = Worker(args.parallel, args.threads)
    try:
        for _ in range(2):
            time_chat(worker)  # warm
        solo = statistics.median(time_chat(worker) for _ in range(args.solo_runs))
        texts = [f"passage number {i} about the weather" for i in range(2048)]
        schema_body = {**CHAT, "max_tokens": 64, "temperature": 1.0, "seed": 1}
        cases = [
            ("regex schema, response_format", post("/v1/chat/completions", {
                **schema_body, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": EXPLODING}},
            }), 0.05),
            ("regex schema, Ollama format", post("/api/chat", {
                "model": MAIN, "messages": CHAT["messages"], "format": EXPLODING, "stream": False,
            }), 0.05),
            ("schema at the repetition limit", post("/v1/chat/completions", {
                **schema_body, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": AT_LIMIT}},
            }), 0.3),
            ("6,000 embeddings, client leaves at 1 s", post("/v1/embeddings", {
                "model": MAIN, "input": [f"text {i}" for i in range(6000)],
            }, leave_after=1.0), 0.05),
            ("2,048 embeddings", post("/v1/embeddings", {"model": MAIN, "input": texts}), 0.5),
            ("2,048 embeddings, client leaves at 1 s", post("/v1/embeddings", {"model": MAIN, "input": texts},
                                                           leave_after=1.0), 1.3),
            ("200,000 stop sequences", post("/v1/chat/completions", {
                **CHAT, "stop": [f"stop{i}" for i in range(200_000)],
            }), 0.05),
            *enum_cases(schema_body),
            *stall_cases(worker),
        ]  # fmt: skip
        print(f"chat alone (8 tokens, temperature 0, median of {args.solo_runs}): {solo:.3f} s")
        # The machine may be shared: each chat under abuse is compared with the chat alone just before it.
        print(f"{'abusive request':<42} {'answer':>10} {'took s':>8} {'in flight':>9} {'alone s':>8} {'chat s':>7} {'ratio':>6}")
        worst = 0.0
        for name, request, probe_after in [c for c in cases if args.only in c[0]]:
            alone = statistics.median(time_chat(worker) for _ in range(3))
            note = abuse(worker, name, request, probe_after=probe_after)
            ratio = note["chat"] / alone
            worst = max(worst, ratio)
            print(
                f"{name:<42} {note.get('status')!s:>10} {note['seconds']:>8.2f} {('yes' if note['in_flight'] else 'no'):>9} "
                f"{alone:>8.3f} {note['chat']:>7.3f} {ratio:>6.2f}"
            )
            error = note.get("error")
            if error:
                print(f"    {(error if isinstance(error, str) else error.get('message', error))[:160]}")
        print("recursive chat template: not reachable over HTTP (templates come from model files; a load refuses one)")
        with worker.client() as c:
            health = c.get("/health").status_code
        met = worst <= GOAL and health == 200 and worker.proc.poll() is None
        print(f"worst ratio {worst:.2f} (goal <= {GOAL:g}); /health after: {health}; goal met: {'yes' if met else 'no'}")
        return 0 if met else 1
    finally:
        worker.close()


if __name__ == "__main__":
    sys.exit(main())
