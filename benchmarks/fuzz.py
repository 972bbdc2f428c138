"""A long fuzz run of the local API: `hearth serve` with the starter model, fed generated requests from
OpenAI's spec and from the server's own /openapi.json (tests/engine/server/fuzzing.py says what is
generated and what is checked), new cases every round, until the time or the rounds are up.

Three documents: ``openai`` (OpenAI's spec for the endpoints Hearth implements), ``app`` (the server's
own document for the same endpoints, with conformance checks) and ``every`` (every operation of the
server's document, the Hub, download, document, remote and admin routes among them, checked for server
errors only, with the local Hub stand-in as the server's hub so nothing reaches the internet).
``schemas`` sends JSON schemas of constrained output instead (tests/engine/server/schema_fuzzing.py):
counts around each bound, deep nesting, enums, patterns, ``$ref`` cycles, odd values, through each dialect
that takes one; the worker must live and each answer be a 200 or a 400 sentence.

Prints the cases run, by operation and by status, and every distinct failure with a curl command that
replays it; exits 1 if there was any failure or the worker died.

    .venv/bin/python benchmarks/fuzz.py [--minutes 5] [--rounds N] [--spec all|both|openai|app|every|schemas] [--examples 50]
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
SPECS = {"all": ("openai", "app", "every", "schemas"), "both": ("openai", "app"), "openai": ("openai",), "app": ("app",),
         "every": ("every",), "schemas": ("schemas",)}  # fmt: skip


def start_server(env_extra: dict[str, str], cwd: Path, log: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    from engine.worker.supervisor import free_port

    port = free_port()
    env = {**os.environ, **env_extra, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("HEARTH_API_KEY", None)
    cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(port), "--model", MODEL, "--api-key", KEY]
    with open(log, "w") as out:  # a long run logs more than a pipe holds
        proc = subprocess.Popen([*cmd, "--parallel", "8", "--ctx", "2048"], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"hearth serve exited with {proc.returncode}; see {log}")
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
    parser.add_argument("--minutes", type=float, default=5.0, help="stop starting rounds after this long")
    parser.add_argument("--rounds", type=int, default=0, help="stop after this many rounds (0: as many as the minutes allow)")
    parser.add_argument("--spec", choices=tuple(SPECS), default="all")
    parser.add_argument("--examples", type=int, default=10, help="cases per operation per round (POST ones for openai and app)")
    args = parser.parse_args()

    import httpx

    from tests.engine.server import fuzzing, schema_fuzzing

    specs = SPECS[args.spec]
    openai_spec = fuzzing.load_yaml(fuzzing.SPEC) if {"openai", "app"} & set(specs) else None
    schemas = fuzzing.OpenAISchemas(openai_spec) if openai_spec is not None else None
    headers = {"Authorization": f"Bearer {KEY}"}
    with tempfile.TemporaryDirectory(prefix="hearth-fuzz-") as tmp:
        folder = Path(tmp)
        docs_folder = folder / "docs"
        docs_folder.mkdir()
        (docs_folder / "otters.txt").write_text("Sea otters hold hands while they sleep.\n")
        work = folder / "cwd"  # a fuzzed relative path finds nothing of the repository
        work.mkdir()
        hub = fuzzing.hub_stand_in(folder / "hub").start()
        proc, root = start_server(fuzzing.every_operation_env(folder / "home", hub.url), work, folder / "serve.log")
        try:
            served = httpx.get(f"{root}/openapi.json", headers=headers, timeout=30).json()
            docs = []
            if "openai" in specs:
                docs.append(("OpenAI's spec", fuzzing.openai_spec_for_hearth(openai_spec, MODEL), f"{root}/v1", "openai"))
            if "app" in specs:
                docs.append(("/openapi.json", fuzzing.app_spec_for_hearth(served, MODEL), root, "app"))
            if "every" in specs:
                doc = fuzzing.every_operation_spec(
                    served, docs_folder=str(docs_folder), remote_url=fuzzing.REMOTE_URL, hub_repo=fuzzing.HUB_REPO
                )
                docs.append(("every operation of /openapi.json, server errors", doc, root, "every"))
            findings = {name: fuzzing.Findings() for name, *_ in docs}
            schema_findings = schema_fuzzing.SchemaFindings() if "schemas" in specs else None
            started = time.monotonic()
            deadline = started + args.minutes * 60
            rounds = 0
            while time.monotonic() < deadline and proc.poll() is None and (not args.rounds or rounds < args.rounds):
                for name, doc, base_url, kind in docs:
                    fuzzing.fuzz(
                        doc,
                        base_url,
                        headers=headers,
                        openai=schemas,
                        max_examples=args.examples if kind == "every" else {"POST": args.examples, "GET": 3},
                        conformance=kind == "app",
                        server_errors_only=kind == "every",
                        seed=None,
                        deadline=deadline,
                        seconds_per_operation=60,  # a slow machine still reaches every operation
                        findings=findings[name],
                    )
                if schema_findings is not None and time.monotonic() < deadline:  # new schemas every round
                    schema_fuzzing.fuzz_schemas(root, headers, MODEL, seed=None, cases=args.examples * 10, findings=schema_findings)
                rounds += 1
            alive = proc.poll() is None
            healthy = alive and httpx.get(f"{root}/health", timeout=10).status_code == 200
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
            hub.stop()
    elapsed = time.monotonic() - started
    total = sum(f.cases for f in findings.values()) + (schema_findings.cases if schema_findings else 0)
    failures = sum(len(f.failures) for f in findings.values()) + (len(schema_findings.failures) if schema_findings else 0)
    print(f"fuzzed {elapsed / 60:.1f} min, {rounds} rounds: {total} cases, {failures} distinct failures")
    for name, f in findings.items():
        print(f"\n== {name}: {f.summary()}")
    if schema_findings is not None:
        print(f"\n== JSON schemas of constrained output: {schema_findings.summary()}")
    print(f"\nworker alive after: {alive}, /health ok: {healthy}")
    return 0 if failures == 0 and healthy else 1


if __name__ == "__main__":
    sys.exit(main())
