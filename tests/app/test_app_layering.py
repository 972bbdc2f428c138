"""The app reaches the engine only through the worker's HTTP API: of the engine it may import
the data-folder paths, the secret store (the OS keyring or a 0600 file), the starter model's name, the SSE
parser, the worker supervisor, the daemon's file (to attach to a running `hearth daemon`) and the agent loop
(itself a client of that API and of MCP servers), nothing else."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
ALLOWED = {
    "engine.agent", "engine.paths", "engine.remote.keys", "engine.sse", "engine.starter", "engine.worker.supervisor",
    "engine.worker.daemon",
}


def engine_imports():
    for path in APP.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name == "engine" or name.startswith("engine."):
                    yield path.relative_to(APP.parent), name


def test_the_app_imports_only_the_engine_modules_it_may():
    offenders = [f"{path}: {name}" for path, name in engine_imports() if name not in ALLOWED]
    assert offenders == []
    assert {name for _path, name in engine_imports()} == ALLOWED  # the rule still describes the code
