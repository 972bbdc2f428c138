"""The recipes the Linux build does not exercise: the Windows version resource, the macOS Info.plist,
the starter model found inside a frozen bundle, and the spec's refusal of an unknown edition."""

from __future__ import annotations

import ast
import os
import plistlib
import shutil
import subprocess
import sys

from engine import __version__
from engine.starter import BUNDLED_DIR, STARTER_FILE, starter_model_path
from tests.packaging.helpers import PACKAGING, ROOT, load_script

VERSION_CALLS = {
    "VSVersionInfo",
    "FixedFileInfo",
    "StringFileInfo",
    "StringTable",
    "StringStruct",
    "VarFileInfo",
    "VarStruct",
}


def test_the_windows_version_resource_names_this_version():
    text = load_script("windows/version_resource.py").render(__version__)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    tree = ast.parse("\n".join(lines), mode="eval")  # PyInstaller eval()s this text with these names
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert {call.func.id for call in calls} <= VERSION_CALLS
    fixed = next(call for call in calls if call.func.id == "FixedFileInfo")
    filevers = ast.literal_eval(next(kw.value for kw in fixed.keywords if kw.arg == "filevers"))
    assert filevers == (*(int(x) for x in __version__.split(".")), 0)
    strings = {
        ast.literal_eval(c.args[0]): ast.literal_eval(c.args[1]) for c in calls if c.func.id == "StringStruct"
    }
    assert strings["ProductVersion"] == __version__ and strings["ProductName"] == "Hearth"
    assert strings["OriginalFilename"] == "Hearth.exe"


def test_the_macos_info_plist_loads_and_keeps_dark_mode_and_retina():
    with (PACKAGING / "macos" / "Info.plist").open("rb") as f:
        info = plistlib.load(f)
    assert info["CFBundleName"] == "Hearth"
    assert info["NSHighResolutionCapable"] is True
    assert info["NSRequiresAquaSystemAppearance"] is False  # follows the system's dark mode


def test_a_frozen_bundle_finds_its_own_starter_model(tmp_path, monkeypatch):
    installed = starter_model_path()
    assert installed is not None
    bundled = tmp_path / BUNDLED_DIR / STARTER_FILE
    bundled.parent.mkdir()
    os.link(installed, bundled) if installed.stat().st_dev == tmp_path.stat().st_dev else shutil.copyfile(
        installed, bundled
    )
    # What PyInstaller's bootloader sets: the folder that holds the bundle's data.
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert starter_model_path() == bundled
    bundled.unlink()
    assert starter_model_path() == installed  # a bundle without it falls back to the package


def test_the_spec_refuses_an_unknown_edition_in_one_sentence(tmp_path):
    env = {**os.environ, "HEARTH_EDITION": "gpu"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--distpath",
            str(tmp_path / "dist"),
            "--workpath",
            str(tmp_path / "build"),
            str(PACKAGING / "hearth.spec"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "HEARTH_EDITION='gpu' is not an edition; use one of standard, cuda." in result.stderr
    assert not any((tmp_path / "dist").glob("*"))  # nothing built
