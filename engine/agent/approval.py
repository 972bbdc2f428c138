"""Who allows a tool call: by default every call asks (Allow once / Always allow this tool / Deny)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.agent.loop import ToolCallRecord
    from engine.agent.sessions import McpTool


class Decision(enum.Enum):
    ONCE = "once"
    ALWAYS = "always"
    DENY = "deny"


Asker = Callable[["ToolCallRecord", "McpTool"], Awaitable[Decision]]


class ApprovalPolicy:
    """Allows the tools in ``always`` (``server/tool`` keys) and asks ``ask`` about the others.

    Args:
        ask: Asks the user (a dialog, the terminal); None denies every call not allowed already.
        always: ``server/tool`` keys always allowed.
        allow_all: Allow every call without asking (``hearth chat --allow-tools``).
        on_always: Called with a key the user just chose to always allow (to save it).
    """

    def __init__(
        self,
        ask: Asker | None = None,
        *,
        always: set[str] | None = None,
        allow_all: bool = False,
        on_always: Callable[[str], None] | None = None,
    ) -> None:
        self.ask = ask
        self.always = set(always or ())
        self.allow_all = allow_all
        self.on_always = on_always

    async def decide(self, call: ToolCallRecord, tool: McpTool) -> Decision:
        if self.allow_all or tool.key in self.always:
            return Decision.ONCE
        if self.ask is None:
            return Decision.DENY
        decision = await self.ask(call, tool)
        if decision is Decision.ALWAYS:
            self.always.add(tool.key)
            if self.on_always is not None:
                self.on_always(tool.key)
        return decision


__all__ = ["ApprovalPolicy", "Asker", "Decision"]
