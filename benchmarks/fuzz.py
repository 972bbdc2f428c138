"""A long fuzz run of the local API: `hearth serve` with the starter model, fed generated requests from
OpenAI's spec and from the server's own /openapi.json (tests/engine/server/fuzzing.py says what is
generated and what is checked), new cases every round, until the time is up.

Prints the cases run, by operation and by status, and every distinct failure with a curl command that
replays it; exits 1 if there was any failure or the worker died.

    .venv/bin/python benchmarks/fuzz.py [--minutes 5] [--spec both|openai|app] [--examples 50]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "smollm2-135m-instruct"
KEY = "fuzz-key"


def start_server(home: str) -> tuple[subprocess.Popen, str]:
    import httpx

    from engine.worker.supervisor import free_port

    port = free_port()
    env = {**os.environ, "HEARTH_HOME": home}
    env.pop("HEARTH_API_KEY", None)
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(port), "--model", MODEL, "--api-key", KEY]
    proc = subprocess.Popen([*cmd, "--parallel", "8", "--ctx", "2048"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"hearth serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{root}/health", timeout=1).status_code == 200:
                return proc, root
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("hearth serve did not become healthy within 3 minutes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--spec", choices=("both", "openai", "app"), default="both")
    parser.add_argument("--examples", type=int, default=10, help="cases per POST operation per round")
    args = parser.parse_args()

    import httpx

    from tests.engine.server import fuzzing

    openai_spec = fuzzing.load_yaml(fuzzing.SPEC)
    schemas = fuzzing.OpenAISchemas(openai_spec)
    headers = {"Authorization": f"Bearer {KEY}"}
    with tempfile.TemporaryDirectory(prefix="hearth-fuzz-") as home:
        proc, root = start_server(home)
        try:
            served = httpx.get(f"{root}/openapi.json", headers=headers, timeout=30).json()
            docs = []
            if args.spec in ("both", "openai"):
                docs.append(("OpenAI's spec", fuzzing.openai_spec_for_hearth(openai_spec, MODEL), f"{root}/v1", False))
            if args.spec in ("both", "app"):
                docs.append(("/openapi.json", fuzzing.app_spec_for_hearth(served, MODEL), root, True))
            findings = {name: fuzzing.Findings() for name, *_ in docs}
            started = time.monotonic()
            deadline = started + args.minutes * 60
            rounds = 0
            while time.monotonic() < deadline and proc.poll() is None:
                for name, doc, base_url, conformance in docs:
                    fuzzing.fuzz(
                        doc,
                        base_url,
                        headers=headers,
                        openai=schemas,
                        max_examples={"POST": args.examples, "GET": 3},
                        conformance=conformance,
                        seed=None,
                        deadline=deadline,
                        seconds_per_operation=60,  # a slow machine still reaches every operation
                        findings=findings[name],
                    )
                rounds += 1
            alive = proc.poll() is None
            healthy = alive and httpx.get(f"{root}/health", timeout=10).status_code == 200
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    elapsed = time.monotonic() - started
    total = sum(f.cases for f in findings.values())
    failures = sum(len(f.failures) for f in findings.values())
    print(f"fuzzed {elapsed / 60:.1f} min, {rounds} rounds: {total} cases, {failures} distinct failures")
    for name, f in findings.items():
        print(f"\n== {name}: {f.summary()}")
    print(f"\nworker alive after: {alive}, /health ok: {healthy}")
    return 0 if failures == 0 and healthy else 1


if __name__ == "__main__":
    sys.exit(main())
