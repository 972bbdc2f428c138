"""Linux desktop integration: the entry validates, `make install-desktop` puts Hearth in the user's
application menu (and `make uninstall-desktop` takes it out), the AppDir has the AppImage layout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine import __version__
from tests.packaging.helpers import ICONS, ROOT, desktop_entry, load_script, validate_desktop_file

desktop = load_script("linux/desktop.py")
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def make(target: str, data_home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_DATA_HOME": str(data_home)}
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), target], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_template_is_a_valid_desktop_entry(tmp_path):
    validate_desktop_file(ROOT / "packaging" / "linux" / "hearth.desktop")


@pytest.mark.parametrize("program", ["/opt/hearth/hearth", "/home/ann/My Apps/hearth $1/hearth"])
def test_rendered_entries_are_valid_and_start_the_app(tmp_path, program):
    path = tmp_path / "hearth.desktop"
    path.write_text(desktop.render(program), encoding="utf-8")
    validate_desktop_file(path)
    entry = desktop_entry(path)
    assert entry["TryExec"] == program
    assert entry["Icon"] == "hearth" and entry["Terminal"] == "false" and entry["Type"] == "Application"
    if " " in program:  # quoted, with `$` escaped for the shell-like parser and `\` for the string
        assert entry["Exec"] == '"/home/ann/My Apps/hearth \\\\$1/hearth" gui'
    else:
        assert entry["Exec"] == f"{program} gui"


def test_install_desktop_adds_hearth_to_the_menu_and_uninstall_removes_only_it(tmp_path):
    data_home = tmp_path / "share"
    neighbour = data_home / "applications" / "other.desktop"
    neighbour.parent.mkdir(parents=True)
    neighbour.write_text("[Desktop Entry]\nType=Application\nName=Other\nExec=other\n")

    result = make("install-desktop", data_home)
    assert result.returncode == 0, result.stdout + result.stderr
    entry_path = data_home / "applications" / "hearth.desktop"
    validate_desktop_file(entry_path)
    entry = desktop_entry(entry_path)
    program = Path(entry["TryExec"])
    built = [ROOT / "dist" / "Hearth.AppDir" / "AppRun", ROOT / "dist" / "hearth" / "hearth"]
    expected = next((p for p in built if p.is_file()), (ROOT / ".venv" / "bin" / "hearth").resolve())
    assert program == expected  # the bundle when built, else the venv's hearth
    assert entry["Exec"] == f"{program} gui"
    version = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=120)
    assert version.stdout.strip() == f"hearth {__version__}"  # the entry's program really is Hearth
    for size in SIZES:
        assert (data_home / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "hearth.png").is_file()
    assert (data_home / "icons" / "hicolor" / "scalable" / "apps" / "hearth.svg").is_file()

    result = make("uninstall-desktop", data_home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not entry_path.exists()
    assert not list((data_home / "icons").rglob("hearth.*"))
    assert neighbour.is_file()


def test_with_nothing_built_the_entry_says_what_to_do(tmp_path):
    with pytest.raises(SystemExit, match="run `make package` .* or `make setup`"):
        desktop.default_program(tmp_path / "no-venv", root=tmp_path)  # a checkout with no dist/ and no venv


def test_appdir_has_the_appimage_layout(tmp_path):
    bundle = tmp_path / "hearth"
    bundle.mkdir()
    program = bundle / "hearth"
    program.write_text('#!/bin/sh\necho "hearth ran with: $*"\n')
    program.chmod(0o755)
    (bundle / "_internal").mkdir()

    appdir = desktop.build_appdir(bundle, tmp_path / "Hearth.AppDir")

    assert not bundle.exists()  # moved, not copied: the bundle is hundreds of MB
    ran = subprocess.run([str(appdir / "AppRun"), "gui", "--smoke", "x.png"], capture_output=True, text=True)
    assert ran.stdout.strip() == "hearth ran with: gui --smoke x.png"
    ran = subprocess.run([str(appdir / "usr" / "bin" / "hearth"), "serve"], capture_output=True, text=True)
    assert ran.stdout.strip() == "hearth ran with: serve"
    validate_desktop_file(appdir / "hearth.desktop")
    assert desktop_entry(appdir / "hearth.desktop")["Exec"] == "hearth gui"
    assert (appdir / "usr" / "share" / "applications" / "hearth.desktop").read_text() == (
        appdir / "hearth.desktop"
    ).read_text()
    assert (appdir / ".DirIcon").resolve() == (appdir / "hearth.png").resolve()
    assert (appdir / "hearth.png").read_bytes() == (
        ICONS / "hicolor" / "256x256" / "apps" / "hearth.png"
    ).read_bytes()
    for size in SIZES:
        assert (
            appdir / "usr" / "share" / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "hearth.png"
        ).is_file()
