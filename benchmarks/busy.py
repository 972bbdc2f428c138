"""One background busy process: single-stream decoding with threads that follow the machine, against the
same server on a pinned count, each against its own quiet rate in the same run.

Two `hearth serve` with the starter model and one slot: one adaptive (no --threads), one pinned
(--threads N, N = Hearth's default count, 2 on a 2-core machine: what every version before adapted).
Each round times a streamed greedy chat of --max-tokens tokens (ignore_eos) on each server with the
machine quiet (twice each, in the order A B B A, and takes the mean), then starts a `python -c "while True: pass"` process, waits --settle seconds, times both
again, and kills it. The order of the two servers alternates from round to round. Decode speed is
(tokens - 1) / (time of the last token - time of the first); the adaptive server starts each answer on
the count it was idle on, and needs half a second of measurement to give up a thread, which is counted.

Goals (issue 34), each round: adaptive busy >= 0.45x its quiet rate (the limit with one core of two free is
0.5x); adaptive quiet >= 0.98x pinned quiet (nothing lost on a quiet machine).
Prints every rate and ratio, round by round, the thread count the adaptive server reported, and the cores
that processes outside this benchmark used while it timed (on a shared machine, a round with much of it
measured something else).

    .venv/bin/python benchmarks/busy.py [--rounds 3] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

MODEL = "smollm2-135m-instruct"
KEY = "busy-key"
SPIN = "while True: pass"
PROMPT = "Tell a long story about a river town, its bridge and the people who trade at its market."
BUSY_GOAL = 0.45
QUIET_GOAL = 0.98


class Outside:
    """CPU that processes outside this benchmark (not it, its servers, its busy process) use over a span."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.procs = [psutil.Process(pid) for pid in [os.getpid(), *pids]]
        self.t0, self.busy0, self.ours0 = time.monotonic(), self._busy(), self._ours()

    def _busy(self) -> float:
        import psutil

        t = psutil.cpu_times()
        return (
            sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "steal", 0.0) - getattr(t, "guest", 0.0)
        )

    def _ours(self) -> float:
        total = 0.0
        for p in self.procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except Exception:  # the busy process has ended
                pass
        return total

    def cores(self) -> float:
        seconds = time.monotonic() - self.t0
        return max(0.0, ((self._busy() - self.busy0) - (self._ours() - self.ours0)) / seconds)


class Server:
    """A `hearth serve` with the starter model and one slot, in a fresh HEARTH_HOME."""

    def __init__(self, threads: int | None) -> None:
        from engine.worker.net import free_port

        self.home = Path(tempfile.mkdtemp(prefix="hearth-busy-"))
        self.port = free_port()
        env = {**os.environ, "HEARTH_HOME": str(self.home), "HEARTH_API_KEY": KEY}
        cmd = [
            sys.executable, "-m", "engine.cli", "serve", "--port", str(self.port), "--model", MODEL,
            "--backend", "llamacpp", "--parallel", "1", "--ctx", "1024",
        ]  # fmt: skip
        if threads:
            cmd += ["--threads", str(threads)]
        self.log = open(self.home / "worker.log", "wb")  # noqa: SIM115 - open for the server's life
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {KEY}"}, timeout=600
        )
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"busy: a server exited; see {self.home / 'worker.log'}")
            try:
                if self.client.get("/health").status_code == 200:
                    self.decode(8)  # loads the model and warms it up
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit("busy: a server did not become ready in 240 s")

    def decode(self, max_tokens: int) -> float:
        """One streamed greedy chat: decode tokens/s."""
        body = {
            "model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "temperature": 0,
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        }  # fmt: skip
        first = last = None
        tokens = 0
        with self.client.stream("POST", "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                    last = time.perf_counter()
                    first = first or last
        if tokens != max_tokens or first is None or last is None or last <= first:
            raise RuntimeError(f"busy: asked for {max_tokens} tokens, got {tokens}")
        return (tokens - 1) / (last - first)

    def threads(self) -> int | None:
        stats = self.client.get("/api/stats").json()
        return stats.get("models", {}).get(MODEL, {}).get("threads")

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=None, help="the pinned server's count (default: Hearth's)")
    ap.add_argument(
        "--settle",
        type=float,
        default=2.0,
        help="seconds between starting or ending the busy process and timing",
    )
    args = ap.parse_args(argv)

    from engine.backends.llamacpp.backend import default_threads

    pinned_threads = args.threads or default_threads()
    print(
        f"starter model, {args.max_tokens} tokens, greedy, {os.cpu_count()} CPUs; pinned: --threads {pinned_threads}"
    )
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    servers = {"adaptive": Server(None), "pinned": Server(pinned_threads)}
    met = True
    try:
        for r in range(args.rounds):
            order = ("adaptive", "pinned") if r % 2 == 0 else ("pinned", "adaptive")
            pids = [s.proc.pid for s in servers.values()]
            outside = Outside(pids)
            # Quiet: A B B A, the mean of each side's two, so that the machine's drift over the four falls on both.
            quiet = {side: 0.0 for side in order}
            for side in (*order, *reversed(order)):
                quiet[side] += servers[side].decode(args.max_tokens) / 2
            outside_quiet = outside.cores()
            spinner = subprocess.Popen([sys.executable, "-c", SPIN])
            try:
                time.sleep(args.settle)
                outside = Outside([*pids, spinner.pid])
                busy = {}
                for side in order:
                    busy[side] = servers[side].decode(args.max_tokens)
                    if side == "adaptive":
                        busy_threads = servers[side].threads()
                outside_busy = outside.cores()
            finally:
                spinner.kill()
                spinner.wait()
            time.sleep(args.settle)
            a_busy, p_busy = busy["adaptive"] / quiet["adaptive"], busy["pinned"] / quiet["pinned"]
            a_quiet = quiet["adaptive"] / quiet["pinned"]
            met = met and a_busy >= BUSY_GOAL and a_quiet >= QUIET_GOAL
            print(
                f"round {r + 1}: quiet adaptive {quiet['adaptive']:6.1f}, pinned {quiet['pinned']:6.1f} tokens/s; "
                f"busy adaptive {busy['adaptive']:6.1f} ({busy_threads} threads after), pinned {busy['pinned']:6.1f}"
            )
            print(
                f"  adaptive busy/quiet {a_busy:.2f}x (goal >= {BUSY_GOAL}), pinned busy/quiet {p_busy:.2f}x, "
                f"adaptive/pinned quiet {a_quiet:.2f}x (goal >= {QUIET_GOAL}); "
                f"other processes used {outside_quiet:.2f} cores quiet, {outside_busy:.2f} busy"
            )
    finally:
        for server in servers.values():
            server.close()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("goals met in every round" if met else "goals NOT met in every round")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
