"""Shared by the packaging tests: the checkout's paths and the recipes' scripts, loaded by path
(packaging/ is no Python package: it would shadow PyPI's `packaging`)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
ICONS = ROOT / "resources" / "icons"


def load_script(relative: str) -> ModuleType:
    path = PACKAGING / relative
    spec = importlib.util.spec_from_file_location(f"hearth_packaging_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def validate_desktop_file(path: Path) -> None:
    """Fail with desktop-file-validate's own words unless the entry is valid."""
    tool = shutil.which("desktop-file-validate")
    if tool is None:
        pytest.skip(
            "desktop-file-validate is not installed (Debian/Ubuntu: apt-get install desktop-file-utils)"
        )
    result = subprocess.run([tool, str(path)], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def desktop_entry(path: Path) -> dict[str, str]:
    """The [Desktop Entry] group's keys and values."""
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key] = value
    return values
