"""The bundle recipe carries what documents need at run time: sqlite-vec's extension where
``sqlite_vec.loadable_path()`` looks, the default embedding model's package with its zip, and every
third-party module engine/documents imports, in every edition.

The spec runs here with PyInstaller's build steps recorded instead of run (building the bundle takes
minutes; `make package-test` does, and test_bundle.py indexes and searches documents with it).
"""

from __future__ import annotations

import ast
import importlib.util
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.packaging.helpers import PACKAGING, ROOT

MODEL_PACKAGE = "all_minilm_l6_v2"


def run_spec(monkeypatch, tmp_path: Path, edition: str) -> dict:
    """What the spec hands PyInstaller's Analysis for ``edition``."""
    import PyInstaller.utils.hooks as hooks

    # the real one walks every module of engine/ and app/ in a subprocess (half a minute on a busy machine)
    monkeypatch.setattr(hooks, "collect_submodules", lambda name, filter=None, **_: [name])
    monkeypatch.setenv("HEARTH_EDITION", edition)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the spec puts the checkout first
    recorded: dict = {}

    def analysis(scripts, **kwargs):
        recorded.update(kwargs)
        return SimpleNamespace(pure=[], scripts=[], binaries=[], datas=[])

    def step(*_args, **_kwargs):
        return SimpleNamespace()

    runpy.run_path(
        str(PACKAGING / "hearth.spec"),
        init_globals={
            "SPECPATH": str(PACKAGING),
            "workpath": str(tmp_path),
            "Analysis": analysis,
            **{name: step for name in ("PYZ", "EXE", "COLLECT", "BUNDLE")},
        },
    )
    return recorded


def third_party_imports_of_documents() -> set[str]:
    """Top-level names of the non-standard-library modules engine/documents imports (at the top or inside
    functions, where its parsers and converter import theirs)."""
    names: set[str] = set()
    for path in (ROOT / "engine" / "documents").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("engine", "__future__")}


@pytest.mark.parametrize("edition", ["standard", "cuda"])
def test_the_recipe_carries_what_documents_need(monkeypatch, tmp_path, edition):
    analysis = run_spec(monkeypatch, tmp_path, edition)
    hidden, excluded = set(analysis["hiddenimports"]), set(analysis["excludes"])

    # sqlite-vec's loadable extension, beside sqlite_vec/__init__.py as loadable_path() expects it
    import sqlite_vec

    extension = Path(sqlite_vec.loadable_path())
    carried = {(Path(src).parent, Path(src).stem, dest) for src, dest in analysis["binaries"]}
    assert (extension.parent, extension.name, "sqlite_vec") in carried

    # every third-party module engine/documents imports goes in, and no edition leaves it out
    needed = third_party_imports_of_documents()
    assert {"sqlite_vec", "sqlean", "pypdf", "docx", "markdownify", "bs4", "markdown_it", "gguf", "safetensors"} <= needed
    assert needed <= {name.split(".")[0] for name in hidden}
    assert not needed & excluded, f"the {edition} edition leaves out {sorted(needed & excluded)}"

    # the default embedding model: its package (found by importlib.util.find_spec, never imported), and
    # its zip where the frozen package's folder is (<bundle>/all_minilm_l6_v2/model.zip)
    assert MODEL_PACKAGE in hidden and MODEL_PACKAGE not in excluded
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    assert spec is not None and spec.submodule_search_locations
    model_zip = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    assert (str(model_zip), MODEL_PACKAGE) in [(str(Path(src)), dest) for src, dest in analysis["datas"]]
