"""Hearth on Linux desktops: the freedesktop entry, the icons, and the AppImage-style folder.

    python packaging/linux/desktop.py install [--exec PROGRAM] [--venv .venv]   # make install-desktop
    python packaging/linux/desktop.py uninstall                                # make uninstall-desktop
    python packaging/linux/desktop.py appdir --bundle dist/hearth --out dist/Hearth.AppDir
    python packaging/linux/desktop.py render --exec PROGRAM                    # print the entry

``install`` writes ``hearth.desktop`` and the icons for the current user under ``$XDG_DATA_HOME``
(``~/.local/share`` when unset); the entry starts the bundle when ``make package`` built one, else
the virtual environment's ``hearth``. ``appdir`` moves PyInstaller's one-folder build into an
AppDir (what ``appimagetool`` turns into an AppImage). Only the standard library is used, so any
Python 3.11 runs it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TEMPLATE = HERE / "hearth.desktop"
HICOLOR = ROOT / "resources" / "icons" / "hicolor"
APP_ID = "hearth"  # app.application sets the same desktop file name, so windows match the entry
ICON_NAMES = (f"{APP_ID}.png", f"{APP_ID}.svg")
APPRUN = """#!/bin/sh
# AppImage entry point: run the bundled Hearth with the arguments given.
HERE="$(dirname "$(readlink -f "$0")")"
exec "$HERE/usr/lib/hearth/hearth" "$@"
"""

# Characters that make the Desktop Entry spec's Exec key need quoting, and those escaped inside quotes.
_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")
_ESCAPED_IN_QUOTES = set('"`$\\')


def exec_argument(program: str) -> str:
    """``program`` as the first word of an Exec value (quoted and escaped as the spec says)."""
    if not any(c in _RESERVED for c in program):
        return program.replace("%", "%%")
    quoted = "".join("\\" + c if c in _ESCAPED_IN_QUOTES else c for c in program)
    return ('"' + quoted + '"').replace("\\", "\\\\").replace("%", "%%")  # then the string escape rule


def render(program: str) -> str:
    """The desktop entry that starts ``program gui``."""
    text = TEMPLATE.read_text(encoding="utf-8")
    return text.replace("@EXEC@", exec_argument(program)).replace("@TRYEXEC@", program.replace("\\", "\\\\"))


def data_home() -> Path:
    """$XDG_DATA_HOME, or ~/.local/share."""
    value = os.environ.get("XDG_DATA_HOME", "")
    return Path(value) if os.path.isabs(value) else Path.home() / ".local" / "share"


def default_program(venv: Path, root: Path = ROOT) -> Path:
    """What the menu entry starts: the AppDir or one-folder bundle if built, else the venv's hearth.

    Raises:
        SystemExit: neither exists.
    """
    candidates = (
        root / "dist" / "Hearth.AppDir" / "AppRun",
        root / "dist" / "hearth" / "hearth",
        venv.resolve() / "bin" / "hearth",
    )
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise SystemExit(
        "Hearth is not built yet: run `make package` (the bundle) or `make setup` (the venv) first."
    )


def icon_files() -> list[Path]:
    return sorted(p for p in HICOLOR.rglob("*") if p.is_file() and p.name in ICON_NAMES)


def install(program: Path, home: Path) -> list[Path]:
    """Write the entry and the icons under ``home`` (a data folder); the files written."""
    apps = home / "applications"
    apps.mkdir(parents=True, exist_ok=True)
    entry = apps / f"{APP_ID}.desktop"
    entry.write_text(render(str(program)), encoding="utf-8")
    written = [entry]
    for icon in icon_files():
        target = home / "icons" / "hicolor" / icon.relative_to(HICOLOR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(icon, target)
        written.append(target)
    return written


def uninstall(home: Path) -> list[Path]:
    """Remove what :func:`install` wrote under ``home``; the files removed."""
    removed = []
    targets = [home / "applications" / f"{APP_ID}.desktop"]
    targets += [home / "icons" / "hicolor" / icon.relative_to(HICOLOR) for icon in icon_files()]
    for path in targets:
        if path.is_file():
            path.unlink()
            removed.append(path)
    return removed


def build_appdir(bundle: Path, out: Path) -> Path:
    """Move the one-folder ``bundle`` into the AppDir ``out`` (replaced if there); ``out``.

    Raises:
        SystemExit: ``bundle`` is not a PyInstaller one-folder build.
    """
    if not (bundle / "hearth").is_file():
        raise SystemExit(f"{bundle} holds no `hearth` executable; build it with `make package` first.")
    if out.exists():
        shutil.rmtree(out)
    lib = out / "usr" / "lib" / "hearth"
    lib.parent.mkdir(parents=True)
    shutil.move(str(bundle), str(lib))
    (out / "usr" / "bin").mkdir()
    (out / "usr" / "bin" / "hearth").symlink_to(Path("..") / "lib" / "hearth" / "hearth")
    apprun = out / "AppRun"
    apprun.write_text(APPRUN, encoding="utf-8")
    apprun.chmod(0o755)
    entry = render("hearth")  # AppImage tools resolve the program inside the image
    (out / f"{APP_ID}.desktop").write_text(entry, encoding="utf-8")
    shared = out / "usr" / "share"
    (shared / "applications").mkdir(parents=True)
    (shared / "applications" / f"{APP_ID}.desktop").write_text(entry, encoding="utf-8")
    shutil.copytree(HICOLOR, shared / "icons" / "hicolor")
    shutil.copyfile(HICOLOR / "256x256" / "apps" / f"{APP_ID}.png", out / f"{APP_ID}.png")
    (out / ".DirIcon").symlink_to(f"{APP_ID}.png")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Hearth's Linux desktop integration.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help="add Hearth to this user's application menu")
    p.add_argument(
        "--exec", dest="program", help="the program the entry starts (default: the bundle, else the venv)"
    )
    p.add_argument("--venv", default=str(ROOT / ".venv"), help="the virtual environment to fall back on")
    sub.add_parser("uninstall", help="remove Hearth from this user's application menu")
    p = sub.add_parser("appdir", help="lay out an AppDir from a one-folder build")
    p.add_argument("--bundle", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("render", help="print the desktop entry")
    p.add_argument("--exec", dest="program", required=True)
    args = parser.parse_args(argv)

    if args.command == "render":
        sys.stdout.write(render(args.program))
    elif args.command == "appdir":
        print(f"AppDir: {build_appdir(Path(args.bundle), Path(args.out))}")
    elif sys.platform in ("darwin", "win32"):
        raise SystemExit(
            "Menu entries are for Linux desktops; on macOS and Windows use the app the README's Install section builds."
        )
    elif args.command == "install":
        program = Path(args.program).resolve() if args.program else default_program(Path(args.venv))
        written = install(program, data_home())
        print(f"Installed {written[0]} (starts {program}) and {len(written) - 1} icons.")
    else:
        removed = uninstall(data_home())
        print(f"Removed {len(removed)} files." if removed else "Hearth had no menu entry here.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
