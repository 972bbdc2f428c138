"""AgentService: the app's MCP servers, their sessions per chat, and the agent runs' event loop.

The loop (engine.agent) runs on a thread of its own (engine.agent.runtime); it is a client of the
worker's API like the rest of the app, and reports to the GUI thread through queued signals.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.agent import AgentRuntime, McpHub, McpServerConfig, McpServerFailed, McpServerStore

log = logging.getLogger(__name__)


class AgentService(QObject):
    """Servers (``mcp-servers.json`` + keyring) and each chat's live hub (which servers a chat uses is one of
    its settings, in the chat store).

    Args:
        folder: The data folder (the servers file goes there; answers' steps go to the chat store).
        servers: The server store (tests pass one with a file key store).
    """

    # chat id: one of its servers stopped (failed to start, or died even while idle), or its servers
    # were started again; :meth:`failures` says which are down now. Emitted from the agent's thread.
    server_state_changed = Signal(int)

    def __init__(self, folder: Path, *, servers: McpServerStore | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.servers = servers or McpServerStore(folder / "mcp-servers.json")
        self.runtime = AgentRuntime()
        self._hubs: dict[int, tuple[tuple[McpServerConfig, ...], McpHub]] = {}
        self._closed = False

    # -- per chat -----------------------------------------------------------------------------
    def known(self, names: Sequence[str]) -> list[str]:
        """Those of ``names`` that are saved servers (a chat keeps the name of one removed since)."""
        saved = {s.name for s in self.servers.servers()}
        return [n for n in names if n in saved]

    def configs_for(self, names: Sequence[str]) -> tuple[McpServerConfig, ...]:
        wanted = set(names)
        return tuple(s for s in self.servers.servers() if s.name in wanted and s.enabled)

    async def hub_for(self, chat_id: int, names: Sequence[str]) -> McpHub:
        """The chat's started servers ``names`` (reused while their settings and processes are unchanged)."""
        configs = self.configs_for(names)
        held = self._hubs.get(chat_id)
        if held is not None:
            if held[0] == configs and not held[1].failures():
                return held[1]
            await held[1].close()
        hub = McpHub(list(configs), on_failure=lambda _f: self.server_state_changed.emit(chat_id))
        await hub.start()
        self._hubs[chat_id] = (configs, hub)
        self.server_state_changed.emit(chat_id)
        return hub

    def failures(self, chat_id: int) -> list[McpServerFailed]:
        """The chat's servers that are down now (with their stderr); they start again with its next answer."""
        held = self._hubs.get(chat_id)
        return held[1].failures() if held is not None else []

    async def probe(self, config: McpServerConfig) -> McpHub:
        """A server started on its own (to list its tools in the settings); the caller closes it."""
        hub = McpHub([McpServerConfig(**{**_fields(config), "enabled": True, "disabled_tools": frozenset()})])
        await hub.start()
        return hub

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def close_all() -> None:
            await asyncio.gather(*(h.close() for _c, h in self._hubs.values()), return_exceptions=True)

        try:
            self.runtime.call(close_all(), timeout=20)
        except Exception as exc:  # at quit: the servers' processes end with ours anyway
            log.warning("closing MCP servers: %s", exc)
        self._hubs.clear()
        self.runtime.close()


def _fields(config: McpServerConfig) -> dict:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


__all__ = ["AgentService"]
