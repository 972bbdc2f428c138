"""The app reaches the engine only through the worker's HTTP API: of the engine it may import
the data-folder paths, the secret store (the OS keyring or a 0600 file), the starter model's name, the SSE
parser, the worker supervisor, the daemon's file (to attach to a running `hearth daemon`), the agent loop
(itself a client of that API and of MCP servers) and the API's response models (the one module of the server
both ends share), nothing else."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
ALLOWED = {
    "engine.agent", "engine.paths", "engine.remote.keys", "engine.sse", "engine.starter", "engine.worker.supervisor",
    "engine.worker.daemon", "engine.server.api_models",
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


def test_of_the_server_the_app_imports_only_its_response_models():
    server = {name for _path, name in engine_imports() if name.startswith("engine.server")}
    assert server == {"engine.server.api_models"}


def test_the_app_parses_answers_without_the_servers_dependencies():
    """The app's API client loads the shared response models at startup: pydantic, and no web framework or
    backend (FastAPI, torch, llama.cpp) with them."""
    code = (
        "import sys; import engine.server.api_models; import app.net.api;"
        "heavy = [m for m in ('fastapi', 'starlette', 'uvicorn', 'torch', 'llama_cpp', 'mlx', 'transformers')"
        " if m in sys.modules]; print(','.join(heavy)); print('pydantic' in sys.modules)"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=APP.parent, env=env)
    assert out.stdout.split("\n")[:2] == ["", "True"]
