"""A real MCP server for the agent tests, on the official SDK: ``python mcp_server.py stdio|http PORT``.

Every call is appended as one JSON line to the file named by ``HEARTH_TEST_MCP_LOG`` (when set), so
a test sees which calls reached the server, with their arguments. With ``HEARTH_TEST_MCP_EXIT_FILE``
set, the server exits on its own, saying so on stderr, once that file exists (at once if it does).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("recorder")


def _record(tool: str, **args) -> None:
    path = os.environ.get("HEARTH_TEST_MCP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "args": args, "at": time.time()}) + "\n")


@server.tool()
def lookup(word: str) -> str:
    """Look a word up in the dictionary and return its meaning."""
    _record("lookup", word=word)
    return f"'{word}' means a small domestic animal. <b>bold</b>"


@server.tool()
async def wait(seconds: float) -> str:
    """Wait for some seconds, then say so."""
    _record("wait", seconds=seconds)
    await asyncio.sleep(min(float(seconds), 30.0))
    _record("wait-end", seconds=seconds)
    return f"waited {seconds} s"


@server.tool()
async def slow_lookup(word: str) -> str:
    """Look a word up in the big dictionary (takes half a minute)."""
    _record("slow_lookup", word=word)
    await asyncio.sleep(30)
    _record("slow_lookup-end", word=word)
    return f"'{word}' is in the big dictionary"


@server.tool()
def crash() -> str:
    """End the server's process at once (a server that dies)."""
    _record("crash")
    print("recorder: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


def _exit_when(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.05)
    print("recorder: exiting on its own, the disk is gone", file=sys.stderr, flush=True)
    os._exit(4)


if __name__ == "__main__":
    if os.environ.get("HEARTH_TEST_MCP_EXIT_FILE"):
        threading.Thread(target=_exit_when, args=(os.environ["HEARTH_TEST_MCP_EXIT_FILE"],), daemon=True).start()
    if os.environ.get("HEARTH_TEST_MCP_FAIL"):
        print("recorder: cannot start, the database is missing", file=sys.stderr, flush=True)
        sys.exit(2)
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
