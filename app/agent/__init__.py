"""The agent in the app: MCP servers per chat, approvals, tool-call cards, the thinking section."""

from app.agent.service import AgentService
from app.agent.tools_feature import ToolsFeature, ToolsPreparer

__all__ = ["AgentService", "ToolsFeature", "ToolsPreparer"]
