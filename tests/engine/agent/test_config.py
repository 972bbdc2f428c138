"""MCP server definitions: mcp.json import, the saved file without secrets, always-allowed tools."""

from __future__ import annotations

import json

import pytest

from engine.agent import McpConfigError, McpImportDeclined, McpServerStore, parse_mcp_json
from engine.remote.keys import FileKeys

MCP_JSON = {
    "mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"TOKEN": "s3cret-env"}},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer s3cret-header"}},
        "off": {"command": "uvx", "args": ["thing"], "disabled": True},
    }
}  # fmt: skip


def test_mcp_json_gives_stdio_and_http_servers():
    servers = {s.name: s for s in parse_mcp_json(json.dumps(MCP_JSON))}
    assert servers["files"].transport == "stdio"
    assert servers["files"].args == ("-y", "@modelcontextprotocol/server-filesystem", "/tmp")
    assert dict(servers["files"].env) == {"TOKEN": "s3cret-env"}
    assert servers["search"].transport == "http"
    assert dict(servers["search"].headers) == {"Authorization": "Bearer s3cret-header"}
    assert servers["off"].enabled is False


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not valid JSON"),
        ('{"servers": 3}', "mcpServers"),
        ('{"mcpServers": {"x": {"args": []}}}', "either a command"),
        ('{"mcpServers": {"bad name!": {"command": "a"}}}', "not usable"),
        ('{"mcpServers": {"x": {"url": "ftp://h"}}}', "http://"),
        ('{"mcpServers": {"x": {"command": "a", "args": "b"}}}', "list of strings"),
    ],
)
def test_bad_mcp_json_says_what_to_fix(text, says):
    with pytest.raises(McpConfigError, match=says):
        parse_mcp_json(text)


def test_store_keeps_secrets_out_of_its_file(tmp_path):
    keys = FileKeys(tmp_path / "secret-store.json")
    source = tmp_path / "mcp.json"
    source.write_text(json.dumps(MCP_JSON))
    store = McpServerStore(tmp_path / "mcp-servers.json", keys=keys)
    store.import_file(source)
    saved = (tmp_path / "mcp-servers.json").read_text()
    assert "s3cret" not in saved and "TOKEN" in saved and "Authorization" in saved
    assert "s3cret-env" in (tmp_path / "secret-store.json").read_text()
    again = {s.name: s for s in McpServerStore(tmp_path / "mcp-servers.json", keys=keys).servers()}
    assert dict(again["files"].env) == {"TOKEN": "s3cret-env"}
    assert dict(again["search"].headers) == {"Authorization": "Bearer s3cret-header"}
    store.save(again["files"].with_tool("write_file", False))
    assert store.get("files").disabled_tools == frozenset({"write_file"})
    store.set_always_allowed("files/read_file", True)
    store.set_always_allowed("search/query", True)
    assert store.always_allowed() == ["files/read_file", "search/query"]
    store.set_always_allowed("search/query", False)
    assert store.always_allowed() == ["files/read_file"]
    store.remove("files")
    assert store.get("files") is None and store.always_allowed() == []
    assert "s3cret-env" not in (tmp_path / "secret-store.json").read_text()


def _mcp_file(path, command: str):
    path.write_text(json.dumps({"mcpServers": {"files": {"command": command, "args": ["serve"]}, "new": {"command": "b"}}}))
    return path


def test_an_import_that_replaces_a_server_asks_and_clears_its_approvals(tmp_path):
    keys = FileKeys(tmp_path / "secret-store.json")
    store = McpServerStore(tmp_path / "mcp-servers.json", keys=keys)
    store.import_file(_mcp_file(tmp_path / "first.json", "a"))
    store.set_always_allowed("files/read_file", True)
    store.set_always_allowed("new/query", True)

    # The same definitions again replace nothing: no question, the approvals stay.
    asked = []
    store.import_file(_mcp_file(tmp_path / "again.json", "a"), confirm=lambda names: asked.append(names) or False)
    assert asked == [] and store.always_allowed() == ["files/read_file", "new/query"]

    # Another command under the same name: asked first; a no (or no one to ask) imports nothing.
    other = _mcp_file(tmp_path / "other.json", "evil")
    for confirm in (None, lambda names: asked.append(names) or False):
        with pytest.raises(McpImportDeclined) as err:
            store.import_file(other, confirm=confirm)
        assert err.value.names == ("files",) and "Nothing was imported" in str(err.value)
    assert asked == [("files",)]
    assert store.get("files").command == "a" and store.always_allowed() == ["files/read_file", "new/query"]

    # A yes replaces it and clears its always-allowed tools (only its own).
    store.import_file(other, confirm=lambda names: True)
    assert store.get("files").command == "evil"
    assert store.always_allowed() == ["new/query"]


def test_hearth_mcp_import_asks_on_a_terminal_and_refuses_without_one(tmp_path, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    first, other = _mcp_file(tmp_path / "first.json", "a"), _mcp_file(tmp_path / "other.json", "evil")
    assert main(["mcp", "import", str(first)]) == 0
    assert "Imported 2 MCP server(s): files, new." in capsys.readouterr().out
    store = McpServerStore()
    store.set_always_allowed("files/read_file", True)

    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["mcp", "import", str(other)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        f"hearth: {other} would replace the saved MCP server(s) files; nothing was imported, "
        "run it again with --yes to replace them."
    )
    assert store.get("files").command == "a" and store.always_allowed() == ["files/read_file"]

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda: "n")
    assert main(["mcp", "import", str(other)]) == 1
    assert "Replace? [y/N]" in capsys.readouterr().err and store.get("files").command == "a"
    monkeypatch.setattr("builtins.input", lambda: "y")
    assert main(["mcp", "import", str(other)]) == 0
    assert store.get("files").command == "evil" and store.always_allowed() == []

    assert main(["mcp", "import", str(first), "--yes"]) == 0  # --yes: no question, even without a terminal
    assert "Replaced files; their always-allowed tools were cleared." in capsys.readouterr().out
    assert store.get("files").command == "a"
