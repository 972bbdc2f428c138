"""The agent in the app: MCP servers and their sessions, the agent loop as an answer producer, approvals,
tool-call cards, the thinking section. Its place in the chats is app.features.tools."""

from app.agent.service import AgentService

__all__ = ["AgentService"]
