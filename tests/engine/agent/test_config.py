"""MCP server definitions: mcp.json import, the saved file without secrets, always-allowed tools."""

from __future__ import annotations

import json

import pytest

from engine.agent import McpConfigError, McpServerStore, parse_mcp_json
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
