"""`hearth daemon install|uninstall`: the login entry written for each platform under a temporary home,
and the platform's tool asked to take it only where it is installed (never for real here)."""

from __future__ import annotations

import configparser
import json
import plistlib
import sys

import pytest

from engine.worker.service import ServiceInstaller
from tests.engine.commands.daemon_helpers import hearth

COMMAND = ["/opt/Hearth App/hearth"]


def _no_run(cmd):
    raise AssertionError(f"ran {cmd} though the tool is missing")


def _installer(tmp_path, platform, *, which=lambda _: None, run=_no_run):
    environ = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
               "APPDATA": str(tmp_path / "appdata"), "HEARTH_HOME": str(tmp_path / "data folder")}  # fmt: skip
    return ServiceInstaller(COMMAND, platform=platform, environ=environ, which=which, run=run, port=9123)


def test_linux_writes_a_systemd_user_unit_that_runs_the_daemon(tmp_path):
    ran = []
    inst = _installer(tmp_path, "linux", which=lambda name: f"/usr/bin/{name}", run=lambda cmd: ran.append(cmd) or 0)
    result = inst.install()
    unit = tmp_path / "config" / "systemd" / "user" / "hearth.service"
    assert result.path == str(unit) and result.written and result.enabled
    parsed = configparser.ConfigParser(interpolation=None)
    parsed.read_string(unit.read_text())
    assert parsed["Service"]["ExecStart"] == '"/opt/Hearth App/hearth" daemon run --port 9123'
    assert parsed["Service"]["Environment"] == f'"HEARTH_HOME={tmp_path / "data folder"}"'
    assert parsed["Service"]["Restart"] == "on-failure" and parsed["Install"]["WantedBy"] == "default.target"
    assert ran == [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "hearth.service"]]
    ran.clear()
    removed = inst.uninstall()
    assert not unit.exists() and removed.message.startswith(f"Removed {unit}.")
    assert ran == [["systemctl", "--user", "disable", "--now", "hearth.service"], ["systemctl", "--user", "daemon-reload"]]


def test_without_systemctl_the_unit_is_written_and_the_message_says_what_to_run(tmp_path):
    result = _installer(tmp_path, "linux").install()
    assert result.written and not result.enabled
    assert "systemctl was not found; enable it with `systemctl --user enable --now hearth.service`." in result.message
    assert "Removed" in _installer(tmp_path, "linux").uninstall().message
    again = _installer(tmp_path, "linux").uninstall()
    assert not again.written and again.message.startswith("No login entry")


def test_macos_writes_a_launchd_agent(tmp_path):
    result = _installer(tmp_path, "darwin").install()
    plist = tmp_path / "home" / "Library" / "LaunchAgents" / "org.hearth.daemon.plist"
    assert result.path == str(plist) and not result.enabled and "launchctl was not found" in result.message
    agent = plistlib.loads(plist.read_bytes())
    assert agent["Label"] == "org.hearth.daemon"
    assert agent["ProgramArguments"] == [*COMMAND, "daemon", "run", "--port", "9123"]
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["EnvironmentVariables"] == {"HEARTH_HOME": str(tmp_path / "data folder")}
    _installer(tmp_path, "darwin").uninstall()
    assert not plist.exists()


def test_windows_writes_a_startup_folder_entry(tmp_path):
    result = _installer(tmp_path, "win32").install()
    entry = tmp_path / "appdata" / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup" / "Hearth daemon.cmd"
    assert result.path == str(entry) and result.enabled
    text = entry.read_bytes().decode()
    assert '"/opt/Hearth App/hearth" daemon up --port 9123\r\n' in text
    assert f'set "HEARTH_HOME={tmp_path / "data folder"}"' in text
    _installer(tmp_path, "win32").uninstall()
    assert not entry.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CLI writes this platform's entry")
def test_the_cli_installs_and_uninstalls_with_json(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "PATH": str(tmp_path / "no-tools")}
    out = hearth("daemon", "install", "--json", home=tmp_path / "data", env=env)
    assert out.returncode == 0, out.stderr
    installed = json.loads(out.stdout)
    unit = tmp_path / "cfg" / "systemd" / "user" / "hearth.service"
    assert installed["path"] == str(unit) and installed["written"] and not installed["enabled"]
    assert f"ExecStart={sys.executable} -m engine.cli daemon run\n" in unit.read_text()
    out = hearth("daemon", "uninstall", "--json", home=tmp_path / "data", env=env)
    assert json.loads(out.stdout)["written"] is False and not unit.exists()
