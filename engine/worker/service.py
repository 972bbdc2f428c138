"""Starting the daemon at login: a systemd user unit (Linux), a launchd agent (macOS) or a Startup-folder
entry (Windows), written and removed by `hearth daemon install|uninstall`.

Each runs ``hearth daemon run`` (the Startup entry ``hearth daemon up``, as Windows has no service manager
for a user's programs). Enabling the entry with the platform's tool (``systemctl --user``, ``launchctl``) is
a step of its own: where the tool is missing, the file is still written and the message says what to run.
The tool and the command runner are passed in, so tests check the files without touching the real ones.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

UNIT_NAME = "hearth.service"
AGENT_LABEL = "org.hearth.daemon"
STARTUP_NAME = "Hearth daemon.cmd"

Runner = Callable[[Sequence[str]], int]


def _run(cmd: Sequence[str]) -> int:
    return subprocess.run(list(cmd), capture_output=True, check=False).returncode


@dataclass(frozen=True, slots=True)
class ServiceResult:
    """What install or uninstall did: the file, whether the platform's tool took it, and what to tell the user."""

    path: str
    written: bool
    enabled: bool
    message: str

    def to_dict(self) -> dict:
        return {"path": self.path, "written": self.written, "enabled": self.enabled, "message": self.message}


def _systemd_quote(arg: str) -> str:
    if arg and not any(c in arg for c in ' \t"\\$%'):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%")
    return f'"{escaped}"'


class ServiceInstaller:
    """Writes and removes the daemon's login entry for one platform.

    Args:
        command: How to start Hearth's CLI (``[python, -m, engine.cli]`` or the frozen executable).
        platform: ``linux``, ``darwin`` or ``win32`` (``sys.platform``).
        environ: The environment: HOME, XDG_CONFIG_HOME, APPDATA, and HEARTH_HOME to keep in the entry.
        which: Finds a program on PATH (``shutil.which``).
        run: Runs a command and returns its exit status.
        port: The daemon's port.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        platform: str = sys.platform,
        environ: Mapping[str, str] | None = None,
        which: Callable[[str], str | None] = shutil.which,
        run: Runner = _run,
        port: int | None = None,
    ) -> None:
        self.command = list(command)
        self.platform = platform
        self.environ = dict(os.environ if environ is None else environ)
        self.which = which
        self.run = run
        self.port = port

    # -- where ----------------------------------------------------------------------------------------
    def _home(self) -> Path:
        return Path(self.environ.get("HOME") or self.environ.get("USERPROFILE") or Path.home())

    @property
    def path(self) -> Path:
        """The file this platform's entry lives in."""
        if self.platform == "darwin":
            return self._home() / "Library" / "LaunchAgents" / f"{AGENT_LABEL}.plist"
        if self.platform == "win32":
            appdata = self.environ.get("APPDATA") or str(self._home() / "AppData" / "Roaming")
            return Path(appdata) / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup" / STARTUP_NAME
        config = self.environ.get("XDG_CONFIG_HOME") or str(self._home() / ".config")
        return Path(config) / "systemd" / "user" / UNIT_NAME

    def _daemon_args(self, action: str) -> list[str]:
        args = [*self.command, "daemon", action]
        if self.port is not None:
            args += ["--port", str(self.port)]
        return args

    # -- what -----------------------------------------------------------------------------------------
    def render(self) -> str | bytes:
        """The entry's contents for this platform."""
        hearth_home = self.environ.get("HEARTH_HOME")
        if self.platform == "darwin":
            agent: dict = {
                "Label": AGENT_LABEL,
                "ProgramArguments": self._daemon_args("run"),
                "RunAtLoad": True,
                "KeepAlive": {"SuccessfulExit": False},
                "ProcessType": "Background",
            }
            if hearth_home:
                agent["EnvironmentVariables"] = {"HEARTH_HOME": hearth_home}
            return plistlib.dumps(agent)
        if self.platform == "win32":
            exe, *rest = self._daemon_args("up")
            line = " ".join(f'"{a}"' if " " in a else a for a in [exe, *rest])
            env = f'set "HEARTH_HOME={hearth_home}"\r\n' if hearth_home else ""
            return f"@echo off\r\nrem Starts the Hearth daemon at login (hearth daemon install).\r\n{env}{line}\r\n"
        lines = [
            "[Unit]",
            "Description=Hearth: local language models, headless (hearth daemon)",
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=" + " ".join(_systemd_quote(a) for a in self._daemon_args("run")),
        ]
        if hearth_home:
            lines.append(f"Environment={_systemd_quote('HEARTH_HOME=' + hearth_home)}")
        lines += ["Restart=on-failure", "RestartSec=5", "", "[Install]", "WantedBy=default.target", ""]
        return "\n".join(lines)

    # -- doing ----------------------------------------------------------------------------------------
    def _tool(self, name: str, commands: list[list[str]], done: str, missing: str) -> tuple[bool, str]:
        if self.which(name) is None:
            return False, missing
        for cmd in commands:
            if self.run(cmd) != 0:
                return False, f"`{' '.join(cmd)}` failed; run it yourself to see why."
        return True, done

    def install(self) -> ServiceResult:
        """Write the entry and, where the platform's tool is here, enable it."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        content = self.render()
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")
        if self.platform == "darwin":
            domain = f"gui/{os.getuid()}" if hasattr(os, "getuid") else "gui"
            enabled, note = self._tool(
                "launchctl", [["launchctl", "bootstrap", domain, str(path)]],
                "launchd started it and starts it at every login.",
                f"launchctl was not found; load it with `launchctl bootstrap {domain} {path}`.",
            )  # fmt: skip
        elif self.platform == "win32":
            enabled, note = True, "Windows starts it at your next login; `hearth daemon up` starts it now."
        else:
            enabled, note = self._tool(
                "systemctl", [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", UNIT_NAME]],
                f"systemd starts it at every login; `systemctl --user start {UNIT_NAME}` starts it now.",
                f"systemctl was not found; enable it with `systemctl --user enable --now {UNIT_NAME}`.",
            )  # fmt: skip
        return ServiceResult(str(path), True, enabled, f"Wrote {path}. {note}")

    def uninstall(self) -> ServiceResult:
        """Disable the entry where the platform's tool is here, and remove its file."""
        path = self.path
        if not path.exists():
            return ServiceResult(str(path), False, False, f"No login entry for the Hearth daemon at {path}.")
        if self.platform == "darwin":
            domain = f"gui/{os.getuid()}" if hasattr(os, "getuid") else "gui"
            _, note = self._tool(
                "launchctl", [["launchctl", "bootout", domain, str(path)]], "launchd stopped it.",
                "launchctl was not found; it stays loaded until you log out.",
            )  # fmt: skip
        elif self.platform == "win32":
            note = "A daemon running now keeps running; `hearth daemon down` stops it."
        else:
            _, note = self._tool(
                "systemctl", [["systemctl", "--user", "disable", "--now", UNIT_NAME]], "systemd stopped and disabled it.",
                "systemctl was not found; a daemon running now keeps running (`hearth daemon down` stops it).",
            )  # fmt: skip
        path.unlink()
        if self.platform not in ("darwin", "win32") and self.which("systemctl") is not None:
            self.run(["systemctl", "--user", "daemon-reload"])
        return ServiceResult(str(path), False, False, f"Removed {path}. {note}")


__all__ = ["AGENT_LABEL", "STARTUP_NAME", "UNIT_NAME", "ServiceInstaller", "ServiceResult"]
