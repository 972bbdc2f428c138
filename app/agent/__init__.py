"""The agent in the app: MCP servers per chat, approvals, tool-call cards, the thinking section."""

from app.agent.hook import AgentUi, install_agent
from app.agent.service import AgentService

__all__ = ["AgentService", "AgentUi", "install_agent"]
