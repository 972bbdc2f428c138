"""The agent loop: MCP servers as tools for a model served by Hearth's API (docs/agent.md)."""

from engine.agent.approval import ApprovalPolicy, Decision
from engine.agent.chat_client import (
    ChatClient,
    ModelTurn,
    ModelTurnError,
    TurnAssembler,
    TurnClient,
    turn_body,
)
from engine.agent.config import (
    McpConfigError,
    McpImport,
    McpImportDeclined,
    McpServerConfig,
    McpServerStore,
    load_mcp_file,
    parse_mcp_json,
)
from engine.agent.loop import AgentEvent, AgentLoop, AgentResult, ToolCallRecord, truncate
from engine.agent.runtime import AgentRun, AgentRuntime
from engine.agent.sessions import McpHub, McpServerFailed, McpTool, ToolOutput

__all__ = [
    "AgentEvent",
    "AgentLoop",
    "AgentResult",
    "AgentRun",
    "AgentRuntime",
    "ApprovalPolicy",
    "ChatClient",
    "ModelTurn",
    "TurnAssembler",
    "TurnClient",
    "turn_body",
    "Decision",
    "McpConfigError",
    "McpHub",
    "McpImport",
    "McpImportDeclined",
    "McpServerConfig",
    "McpServerFailed",
    "McpServerStore",
    "McpTool",
    "ModelTurnError",
    "ToolCallRecord",
    "ToolOutput",
    "load_mcp_file",
    "parse_mcp_json",
    "truncate",
]
