"""MCP server definitions: a stdio command (arguments, environment) or a streamable-HTTP URL (headers).

Read from and written to ``mcp-servers.json`` in the data folder, and imported from the ``mcp.json``
format other MCP clients write (``{"mcpServers": {"name": {"command": ..., "args": [...], "env": {...}}
or {"url": ..., "headers": {...}}}}``). Environment values and headers are secrets: the file keeps only
their names; the values go to the OS keyring (service ``hearth-mcp``) where one is usable, else to a
file only the user can read, as the remote providers' keys do (:mod:`engine.remote.keys`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import HearthError
from engine.remote.keys import KeyStore, SecretStore, write_private_text

log = logging.getLogger(__name__)

SERVICE = "hearth-mcp"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class McpConfigError(HearthError):
    """An MCP server definition or mcp.json file that cannot be used (the message says why)."""


class McpImportDeclined(McpConfigError):
    """An mcp.json import that would replace saved servers was not confirmed; nothing was imported."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        super().__init__(
            f"Nothing was imported: it would replace the MCP server{'s' if len(names) > 1 else ''} "
            f"{', '.join(repr(n) for n in names)} and clear {'their' if len(names) > 1 else 'its'} always-allowed tools; "
            "confirm the replacement to import it."
        )


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server. ``env`` and ``headers`` hold values only in memory; the store keeps them secret.

    Attributes:
        name: Unique name (letters, digits, ``_ . -``).
        command: The program of a stdio server (None for an HTTP one).
        args: Its arguments.
        env: Environment variables set for it.
        url: The endpoint of a streamable-HTTP server.
        headers: HTTP headers sent to it (an ``Authorization`` token, say).
        enabled: Started for chats that use MCP servers.
        disabled_tools: Tools of this server switched off (never offered to the model).
        cwd: Working folder of a stdio server.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    enabled: bool = True
    disabled_tools: frozenset[str] = frozenset()
    cwd: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name or ""):
            raise McpConfigError(
                f"MCP server name '{self.name}' is not usable; use letters, digits, '_', '.' or '-' (64 at most)."
            )
        if bool(self.command) == bool(self.url):
            raise McpConfigError(f"MCP server '{self.name}' needs either a command (stdio) or a url (HTTP), not both.")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise McpConfigError(f"MCP server '{self.name}': the url must start with http:// or https://.")

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def describe(self) -> str:
        """What it runs or where it is, for lists (no secret values)."""
        if self.command:
            return " ".join([self.command, *self.args])
        return self.url or ""

    def runs_as(self, other: McpServerConfig) -> bool:
        """Whether ``other`` starts the same server: the same command, arguments, folder, URL and secrets
        (whatever the tools switched off or the enabled switch)."""
        return (self.command, self.args, self.cwd, self.url, dict(self.env), dict(self.headers)) == (
            other.command, other.args, other.cwd, other.url, dict(other.env), dict(other.headers)
        )  # fmt: skip

    def with_tool(self, tool: str, on: bool) -> McpServerConfig:
        off = set(self.disabled_tools)
        (off.discard if on else off.add)(tool)
        return replace(self, disabled_tools=frozenset(off))


def _strings(value: Any, what: str, server: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise McpConfigError(f"MCP server '{server}': '{what}' must be an object of names to strings.")
    return {str(k): str(v) for k, v in value.items()}


def server_from_json(name: str, item: Any) -> McpServerConfig:
    """One server from its ``mcp.json`` entry.

    Raises:
        McpConfigError: the entry is not an object or names neither a command nor a url.
    """
    if not isinstance(item, dict):
        raise McpConfigError(f"MCP server '{name}' must be an object with a 'command' or a 'url'.")
    args = item.get("args") or []
    if not isinstance(args, list):
        raise McpConfigError(f"MCP server '{name}': 'args' must be a list of strings.")
    url = item.get("url") or item.get("serverUrl")
    return McpServerConfig(
        name=name,
        command=item.get("command") or None,
        args=tuple(str(a) for a in args),
        env=tuple(_strings(item.get("env"), "env", name).items()),
        url=url or None,
        headers=tuple(_strings(item.get("headers"), "headers", name).items()),
        enabled=not bool(item.get("disabled", False)),
        disabled_tools=frozenset(str(t) for t in item.get("disabledTools") or ()),
        cwd=item.get("cwd") or None,
    )


def parse_mcp_json(text: str) -> list[McpServerConfig]:
    """The servers of an ``mcp.json`` text (``{"mcpServers": {...}}``; a bare ``{"servers": ...}`` too).

    Raises:
        McpConfigError: the text is not JSON or not in that shape (the message says what to fix).
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise McpConfigError(f"The MCP file is not valid JSON ({exc}); fix it and import again.") from exc
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError('The MCP file needs an object "mcpServers": {"name": {"command": ...}}.')
    return [server_from_json(str(name), item) for name, item in servers.items()]


def load_mcp_file(path: str | Path) -> list[McpServerConfig]:
    """Servers from an ``mcp.json`` file. Raises McpConfigError (also when it cannot be read)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"Cannot read the MCP file {path} ({exc.strerror}); check the path.") from exc
    return parse_mcp_json(text)


@dataclass(frozen=True, slots=True)
class McpImport:
    """What importing an mcp.json would do: its servers, and the names of the saved servers it would
    replace with a different definition (a server defined the same is no replacement)."""

    servers: tuple[McpServerConfig, ...]
    replaces: tuple[str, ...] = ()


@dataclass
class McpServerStore:
    """The saved servers (``mcp-servers.json``), their secrets, and the tools always allowed.

    Args:
        path: The file (default: ``mcp-servers.json`` in the data folder).
        keys: Where secret values go (default: the OS keyring where usable, else
            ``mcp-secrets.json`` beside ``path``, mode 0600).
    """

    path: Path | None = None
    keys: KeyStore | None = None
    _secrets: SecretStore = field(init=False)

    def __post_init__(self) -> None:
        if self.path is None:
            from engine.paths import hearth_home

            self.path = hearth_home() / "mcp-servers.json"
        self._secrets = SecretStore(SERVICE, self.path.with_name("mcp-secrets.json"), keys=self.keys)

    # -- secrets ------------------------------------------------------------------------------
    def _store(self, kind: str) -> KeyStore | None:
        return self._secrets.store(kind)

    def _put_secret(self, key: str, value: str) -> str:
        return self._secrets.put(key, value)

    def _get_secret(self, kind: str, key: str) -> str:
        return self._secrets.get(key, kind) or ""

    # -- the file -----------------------------------------------------------------------------
    def _read(self) -> dict[str, Any]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"servers": {}, "always_allow": []}
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", self.path, exc)
            return {"servers": {}, "always_allow": []}
        if not isinstance(data, dict):
            return {"servers": {}, "always_allow": []}
        data.setdefault("servers", {})
        data.setdefault("always_allow", [])
        return data

    def _write(self, data: dict[str, Any]) -> None:
        assert self.path is not None
        write_private_text(self.path, json.dumps(data, indent=2))

    def servers(self) -> list[McpServerConfig]:
        """Every saved server, with its secret values read back."""
        out: list[McpServerConfig] = []
        for name, item in self._read()["servers"].items():
            try:
                env = tuple((k, self._get_secret(kind, f"{name}/env/{k}")) for k, kind in item.get("env", {}).items())
                headers = tuple(
                    (k, self._get_secret(kind, f"{name}/header/{k}")) for k, kind in item.get("headers", {}).items()
                )
                out.append(
                    McpServerConfig(
                        name=name,
                        command=item.get("command"),
                        args=tuple(item.get("args", ())),
                        env=env,
                        url=item.get("url"),
                        headers=headers,
                        enabled=bool(item.get("enabled", True)),
                        disabled_tools=frozenset(item.get("disabled_tools", ())),
                        cwd=item.get("cwd"),
                    )
                )
            except (McpConfigError, AttributeError, TypeError) as exc:
                log.warning("skipping MCP server %s in %s: %s", name, self.path, exc)
        return out

    def get(self, name: str) -> McpServerConfig | None:
        return next((s for s in self.servers() if s.name == name), None)

    def save(self, server: McpServerConfig) -> None:
        """Add or replace a server; its env values and headers go to the secret store."""
        data = self._read()
        old = data["servers"].get(server.name, {})
        for section in ("env", "headers"):
            part = "env" if section == "env" else "header"
            for key, kind in old.get(section, {}).items():
                store = self._store(kind)
                if store is not None:
                    store.delete(f"{server.name}/{part}/{key}")
        data["servers"][server.name] = {
            "command": server.command,
            "args": list(server.args),
            "url": server.url,
            "cwd": server.cwd,
            "enabled": server.enabled,
            "disabled_tools": sorted(server.disabled_tools),
            "env": {k: self._put_secret(f"{server.name}/env/{k}", v) for k, v in server.env},
            "headers": {k: self._put_secret(f"{server.name}/header/{k}", v) for k, v in server.headers},
        }
        self._write(data)

    def remove(self, name: str) -> None:
        """Forget a server, its secrets and its always-allowed tools."""
        data = self._read()
        item = data["servers"].pop(name, None)
        if item is None:
            return
        for section, part in (("env", "env"), ("headers", "header")):
            for key, kind in item.get(section, {}).items():
                store = self._store(kind)
                if store is not None:
                    store.delete(f"{name}/{part}/{key}")
        data["always_allow"] = [a for a in data["always_allow"] if not a.startswith(f"{name}/")]
        self._write(data)

    def plan_import(self, path: str | Path) -> McpImport:
        """What importing the ``mcp.json`` at ``path`` would add and replace. Raises McpConfigError."""
        servers = load_mcp_file(path)
        saved = {s.name: s for s in self.servers()}
        replaces = tuple(s.name for s in servers if s.name in saved and not saved[s.name].runs_as(s))
        return McpImport(tuple(servers), replaces)

    def apply_import(self, plan: McpImport) -> list[McpServerConfig]:
        """Save every server of ``plan``; a replaced server loses its always-allowed tools (they were
        allowed for what it ran before)."""
        for server in plan.servers:
            self.save(server)
        if plan.replaces:
            data = self._read()
            data["always_allow"] = [a for a in data["always_allow"] if str(a).split("/", 1)[0] not in plan.replaces]
            self._write(data)
        return list(plan.servers)

    def import_file(
        self, path: str | Path, *, confirm: Callable[[tuple[str, ...]], bool] | None = None
    ) -> list[McpServerConfig]:
        """Add every server of an ``mcp.json`` file. Replacing saved servers of the same name (and
        clearing their always-allowed tools) needs ``confirm(names)`` to say yes.

        Raises:
            McpImportDeclined: it would replace servers and was not confirmed (nothing is imported).
            McpConfigError: the file cannot be read or used.
        """
        plan = self.plan_import(path)
        if plan.replaces and (confirm is None or not confirm(plan.replaces)):
            raise McpImportDeclined(plan.replaces)
        return self.apply_import(plan)

    # -- approvals ----------------------------------------------------------------------------
    def always_allowed(self) -> list[str]:
        """``server/tool`` names the user chose to always allow."""
        return [str(a) for a in self._read()["always_allow"]]

    def set_always_allowed(self, key: str, allowed: bool) -> None:
        data = self._read()
        keys = [a for a in data["always_allow"] if a != key]
        if allowed:
            keys.append(key)
        data["always_allow"] = keys
        self._write(data)


__all__ = [
    "McpConfigError",
    "McpImport",
    "McpImportDeclined",
    "McpServerConfig",
    "McpServerStore",
    "load_mcp_file",
    "parse_mcp_json",
    "server_from_json",
]
