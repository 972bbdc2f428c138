"""Live MCP servers on the official ``mcp`` SDK: start them, list their tools, call them.

Each server runs in a task of its own that holds the SDK's transport and ``ClientSession`` open
(their cancel scopes must be entered and left in one task); calls come from any task of the same
event loop. A server that fails to start or dies is marked failed with its stderr (stdio) or the
error (HTTP); the others and the chat go on without it. A stdio server that exits while idle is
noticed when it exits (its stdout ends), not at the next call, and the hub's ``on_failure`` is told.
"""

from __future__ import annotations

import asyncio
import logging
import re
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from engine.agent.config import McpConfigError, McpServerConfig

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0
STDERR_TAIL = 4000
_FN_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class McpTool:
    """A tool of a live server, as offered to the model under ``name`` (unique across servers)."""

    name: str
    server: str
    tool: str  # its name on the server
    description: str
    parameters: dict[str, Any]

    @property
    def key(self) -> str:
        """``server/tool``: how approvals and switches name it."""
        return f"{self.server}/{self.tool}"

    def as_openai(self) -> dict[str, Any]:
        params = self.parameters if isinstance(self.parameters, dict) and self.parameters else {"type": "object"}
        if params.get("type") != "object":
            params = {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description[:1024], "parameters": params},
        }


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a call returned: its text (untrusted, never rendered or run) and whether it is an error."""

    text: str
    is_error: bool = False


class McpServerFailed(Exception):
    """A server is not running (failed to start or died); ``stderr`` holds what it said."""

    def __init__(self, server: str, reason: str, stderr: str = "") -> None:
        super().__init__(f"MCP server '{server}' is not running: {reason}")
        self.server = server
        self.reason = reason
        self.stderr = stderr


def _output_text(result: Any) -> str:
    parts: list[str] = []
    for item in getattr(result, "content", None) or ():
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(item, 'mime_type', '') or 'binary'}]")
        elif kind == "resource":
            res = item.resource
            parts.append(getattr(res, "text", None) or f"[resource: {getattr(res, 'uri', '')}]")
        elif kind == "resource_link":
            parts.append(f"[link: {getattr(item, 'uri', '')}]")
    if not parts and getattr(result, "structured_content", None) is not None:
        import json

        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


class _EndWatch:
    """A transport's read stream, as the SDK's session reads it, that says when it ends: the
    server's stdout closed (it exited) or its connection broke."""

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    async def receive(self) -> Any:
        import anyio

        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _EndWatch:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> None:
        await self.aclose()


class McpConnection:
    """One server: started by :meth:`start`, closed by :meth:`close`.

    ``on_failed`` (set by the hub) is called once, on the event loop, when the server failed to
    start or stopped on its own; by then ``error`` says why and its stderr is complete.
    """

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.name = config.name
        self.session: Any = None
        self.tools: list[Any] = []  # the SDK's Tool objects
        self.error: str | None = None
        self.on_failed: Callable[[McpConnection], None] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.session is not None and self.error is None

    def stderr_tail(self) -> str:
        """The last lines the server wrote on stderr (stdio servers)."""
        try:
            self._stderr.flush()
            self._stderr.seek(0, 2)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - STDERR_TAIL))
            return self._stderr.read().strip()
        except (OSError, ValueError):
            return ""

    async def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and list its tools; on failure ``error`` says why (never raises)."""
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            self.error = f"it did not answer within {timeout:.0f} s"
            self._closing.set()

    async def _run(self) -> None:
        from mcp.client.session import ClientSession

        try:
            async with AsyncExitStack() as stack:
                if self.config.command:
                    from mcp.client.stdio import StdioServerParameters, stdio_client

                    params = StdioServerParameters(
                        command=self.config.command,
                        args=list(self.config.args),
                        env=dict(self.config.env) or None,
                        cwd=self.config.cwd,
                    )
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=self._stderr))
                else:
                    from mcp.client.streamable_http import streamable_http_client
                    from mcp.shared._httpx_utils import create_mcp_http_client

                    url = self.config.url
                    if not url:  # the config refuses this; kept for the type checker's sake as a clear error
                        raise McpConfigError(f"MCP server '{self.name}' has neither a command nor a url.")
                    http = await stack.enter_async_context(create_mcp_http_client(headers=dict(self.config.headers)))
                    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
                session = await stack.enter_async_context(ClientSession(_EndWatch(read, self._ended), write))
                await session.initialize()
                listed = await session.list_tools()
                self.tools = list(listed.tools)
                self.session = session
                self._ready.set()
                await self._closing.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # ExceptionGroup from the SDK's task groups, OSError from the spawn
            self.error = self.error or _reason(exc)
        finally:
            self.session = None
            self._ready.set()
            if self.error is not None:
                log.info("MCP server %s stopped: %s", self.name, self.error)
                if self.on_failed is not None:
                    try:
                        self.on_failed(self)
                    except Exception:  # a listener's bug must not hide the failure from the chat
                        log.exception("MCP failure listener failed")

    def _ended(self) -> None:
        """The server's side of the transport ended: unless we are closing it, it stopped on its own."""
        if self._closing.is_set() or self.error is not None:
            return
        self.error = "it exited" if self.config.command else "its connection closed"
        self._closing.set()  # the task leaves the SDK's contexts, which reap the process

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float | None = None) -> ToolOutput:
        """Call one tool.

        Raises:
            McpServerFailed: the server is not running or died during the call.
        """
        session = self.session
        if session is None or self.error is not None:
            raise McpServerFailed(self.name, self.error or "it is not started", self.stderr_tail())
        try:
            result = await session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            from mcp.shared.exceptions import MCPError

            if isinstance(exc, MCPError) and "closed" not in str(exc).lower():
                return ToolOutput(f"error: {exc}", is_error=True)  # the server answered with an error
            await asyncio.sleep(0.05)  # let the process's last words reach the stderr file
            self.error = self.error or _reason(exc)  # "it exited", when its stdout ended first
            self._closing.set()
            raise McpServerFailed(self.name, self.error, self.stderr_tail()) from exc
        return ToolOutput(_output_text(result), is_error=bool(getattr(result, "is_error", False)))

    async def close(self) -> None:
        self._closing.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            except (TimeoutError, Exception):
                self._task.cancel()
        self._stderr.close()


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        return f"its command was not found ({text})"
    return text


class McpHub:
    """The servers of one chat (or one ``hearth chat --mcp`` run) and their tools, by model-facing name."""

    def __init__(
        self, configs: list[McpServerConfig], *, on_failure: Callable[[McpServerFailed], None] | None = None
    ) -> None:
        """``on_failure`` is told (on the event loop) of each server that fails to start or dies."""
        self.connections = [McpConnection(c) for c in configs if c.enabled]
        self._tools: dict[str, McpTool] = {}
        self._reported: set[str] = set()
        if on_failure is not None:
            for conn in self.connections:
                conn.on_failed = lambda c: on_failure(McpServerFailed(c.name, c.error or "", c.stderr_tail()))

    async def start(self) -> None:
        """Start every server at once; failed ones keep their ``error`` and stderr."""
        t0 = time.perf_counter()
        await asyncio.gather(*(c.start() for c in self.connections))
        log.info("MCP servers started in %.2f s", time.perf_counter() - t0)
        self._index()

    def _index(self) -> None:
        tools: dict[str, McpTool] = {}
        for conn in self.connections:
            if not conn.alive:
                continue
            for t in conn.tools:
                if t.name in conn.config.disabled_tools:
                    continue
                name = _FN_NAME.sub("_", t.name)[:64]
                if name in tools:  # the same name on two servers: the later one is named after its server
                    name = _FN_NAME.sub("_", f"{conn.name}_{t.name}")[:64]
                tools[name] = McpTool(
                    name=name,
                    server=conn.name,
                    tool=t.name,
                    description=t.description or "",
                    parameters=dict(t.input_schema or {}),
                )
        self._tools = tools

    def tools(self) -> list[McpTool]:
        """The tools offered to the model now (a failed server's are gone)."""
        return [t for t in self._tools.values() if self.connection(t.server).alive]

    def tool(self, name: str) -> McpTool | None:
        t = self._tools.get(name)
        return t if t is not None and self.connection(t.server).alive else None

    def connection(self, server: str) -> McpConnection:
        return next(c for c in self.connections if c.name == server)

    def failures(self) -> list[McpServerFailed]:
        """Servers that failed to start or died, with their stderr."""
        return [McpServerFailed(c.name, c.error, c.stderr_tail()) for c in self.connections if c.error]

    def new_failures(self) -> list[McpServerFailed]:
        """Failures not returned here before (each is said once)."""
        fresh = [f for f in self.failures() if f.server not in self._reported]
        self._reported.update(f.server for f in fresh)
        return fresh

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        """Call a tool by its model-facing name. Raises McpServerFailed, KeyError (no such tool)."""
        tool = self._tools[name]
        return await self.connection(tool.server).call(tool.tool, arguments)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections), return_exceptions=True)


__all__ = ["McpConnection", "McpHub", "McpServerFailed", "McpTool", "ToolOutput"]
