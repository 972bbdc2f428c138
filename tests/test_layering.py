"""Layer boundaries: engine never imports Qt; backends never import the server; heavy
dependencies stay lazy so `hearth --help` starts fast."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(package: str):
    root = ROOT / package
    for path in [root] if root.is_file() else root.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield path, node.module


def test_engine_never_imports_qt():
    offenders = [str(p) for p, mod in imported_modules("engine") if mod.split(".")[0] in ("PySide6", "shiboken6", "app")]
    assert offenders == []


def test_backends_never_import_the_server():
    offenders = [
        str(p) for p, mod in imported_modules("engine/backends") if mod.startswith(("engine.server", "engine.worker"))
    ]
    assert offenders == []


def test_cli_help_imports_no_heavy_dependency():
    code = (
        "import sys; from engine.cli import build_parser; build_parser();"
        "heavy = [m for m in ('torch', 'llama_cpp', 'mlx', 'PySide6', 'transformers', 'fastapi', 'sqlalchemy')"
        " if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_the_server_and_the_worker_share_the_model_pool_and_never_import_each_other():
    server = {mod for _, mod in imported_modules("engine/server")}
    worker = {mod for _, mod in imported_modules("engine/worker")}
    assert not [m for m in server if m.startswith("engine.worker")]
    assert not [m for m in worker if m.startswith("engine.server")]
    assert "engine.pool" in server and "engine.pool" in worker
    pool = [mod for _, mod in imported_modules("engine/pool.py")]
    assert not [m for m in pool if m.startswith(("engine.server", "engine.worker"))]


def test_the_catalog_never_imports_a_backend():
    offenders = [
        f"{p.relative_to(ROOT)}: {mod}" for p, mod in imported_modules("engine/catalog") if mod.startswith("engine.backends")
    ]
    assert offenders == []
