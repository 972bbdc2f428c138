"""Tools in the chats: the Tools button of the chat header, the notice of a chat's MCP server that
stopped (with its stderr), the preparer that answers such chats through the agent loop, and the
approval dialogs of its calls.

It plugs into the places the chat page and the controller offer (a header button, a notice, a request
preparer); nothing of theirs is changed from here.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QObject, QSize, Qt, Signal
from PySide6.QtWidgets import QLabel, QToolButton

from app.agent.agent_producer import AgentProducer, ApprovalRequest
from app.agent.servers_dialog import McpServersDialog
from app.agent.service import AgentService
from app.agent.turn_client import QtTurnClient
from app.agent.widgets import ApprovalDialog
from app.chat.controller import ChatController
from app.chat.preparers import AnswerRequest
from app.pages.chats_page import ChatsPage

STDERR_LINES = 6  # of a stopped server's stderr, in the chat's notice


class ToolsPreparer(QObject):
    """Chats with MCP servers on answer through the agent loop (tool choice from the chat's settings)."""

    name = "tools"
    order = 30  # after documents and thinking: the agent loop it may choose sends the whole body each turn
    producer_made = Signal(object)  # AgentProducer: the feature queues its approvals

    def __init__(self, agent: AgentService, client: QtTurnClient, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.agent = agent
        self.client = client

    def prepare(self, request: AnswerRequest) -> None:
        chat = request.chat
        servers = tuple(self.agent.known(chat.settings.mcp_servers))
        if not servers:
            return
        tool_choice = "required" if chat.settings.tool_first else "auto"

        def make() -> AgentProducer:
            producer = AgentProducer(self.agent, self.client, chat.id, servers=servers, tool_choice=tool_choice)
            self.producer_made.emit(producer)
            return producer

        request.producer = make
        request.added.append(f"Tools: {', '.join(servers)}")


class ToolsFeature(QObject):
    """The window's tools (tests reach the dialogs through it)."""

    def __init__(self, page: ChatsPage, controller: ChatController, agent: AgentService, client: QtTurnClient,
                 parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self.page = page
        self.controller = controller
        self.agent = agent
        self.approval_dialog: ApprovalDialog | None = None
        self.servers_dialog: McpServersDialog | None = None
        self._dialog_producer: AgentProducer | None = None
        self._queue: list[tuple[AgentProducer, ApprovalRequest]] = []
        self.tools_button = QToolButton()
        self.tools_button.setObjectName("mcpToolsButton")
        self.tools_button.setText("Tools")
        self.tools_button.setToolTip("MCP servers this chat may use")
        self.tools_button.setIconSize(QSize(18, 18))
        self.tools_button.clicked.connect(self.open_servers)
        page.add_header_button(self.tools_button)
        self.server_notice = QLabel()  # a server of this chat that stopped, with its stderr
        self.server_notice.setObjectName("Notice")
        self.server_notice.setStyleSheet("QLabel { margin: 8px 20px 0 20px; }")  # in line with the chat
        self.server_notice.setTextFormat(Qt.TextFormat.PlainText)  # stderr is untrusted text
        self.server_notice.setWordWrap(True)
        self.server_notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.server_notice.hide()
        page.add_notice(self.server_notice)
        self.preparer = ToolsPreparer(agent, client, self)
        self.preparer.producer_made.connect(self._producer_made)
        controller.add_preparer(self.preparer)
        page.chat_opened.connect(lambda _id: self.update_button())
        agent.server_state_changed.connect(self._server_state_changed)
        self.update_button()

    def update_button(self) -> None:
        """The Tools button and the stopped-server notice, for the chat on screen."""
        chat_id = self.page.chat_id
        n = len(self.chat_servers(chat_id)) if chat_id is not None else 0
        failures = self.agent.failures(chat_id) if chat_id is not None else []
        stopped = f", {len(failures)} stopped" if failures else ""
        self.tools_button.setText(f"Tools ({n}{stopped})" if n else "Tools")
        parts = []
        for f in failures:
            said = f"MCP server {f.server} stopped: {f.reason}. The chat goes on without its tools; "
            said += "it is started again with your next message."
            tail = f.stderr.splitlines()[-STDERR_LINES:]
            parts.append("\n".join([said, *(f"  {line}" for line in tail)]))
        self.server_notice.setText("\n\n".join(parts))
        self.server_notice.setVisible(bool(parts))

    def _server_state_changed(self, chat_id: int) -> None:
        if chat_id == self.page.chat_id:
            self.update_button()
        if self.servers_dialog is not None and self.servers_dialog.chat_id == chat_id:
            self.servers_dialog.refresh()

    def open_servers(self) -> McpServersDialog:
        dialog = McpServersDialog(self.agent, self.page.chat_id, self, self.page.window())
        dialog.changed.connect(self.update_button)
        self.servers_dialog = dialog
        dialog.open()
        return dialog

    def chat_servers(self, chat_id: int) -> list[str]:
        """The saved MCP servers the chat uses (kept in its settings)."""
        chat = self.controller.chat(chat_id)
        return self.agent.known(chat.settings.mcp_servers) if chat is not None else []

    def set_chat_servers(self, chat_id: int, names: list[str]) -> None:
        chat = self.controller.chat(chat_id)
        if chat is not None:
            self.controller.update_settings(chat_id, replace(chat.settings, mcp_servers=tuple(names)))

    def tool_first(self, chat_id: int) -> bool:
        """Whether the chat's model must call a tool before it answers (kept in its settings)."""
        chat = self.controller.chat(chat_id)
        return chat is not None and chat.settings.tool_first

    def set_tool_first(self, chat_id: int, on: bool) -> None:
        chat = self.controller.chat(chat_id)
        if chat is not None:
            self.controller.update_settings(chat_id, replace(chat.settings, tool_first=on))

    # -- approvals --------------------------------------------------------------------------------
    def _producer_made(self, producer: AgentProducer) -> None:
        producer.approval_needed.connect(lambda request, p=producer: self._ask(p, request))
        producer.finished.connect(lambda _end, p=producer: self._producer_ended(p))
        producer.failed.connect(lambda _err, p=producer: self._producer_ended(p))

    def _producer_ended(self, producer: AgentProducer) -> None:
        self._queue = [(p, q) for p, q in self._queue if p is not producer]
        if self.approval_dialog is not None and self._dialog_producer is producer:
            dialog, self.approval_dialog, self._dialog_producer = self.approval_dialog, None, None
            dialog.decided.disconnect()  # the answer ended: its calls are denied already
            dialog.close()
            self._next()

    def _ask(self, producer: AgentProducer, request: ApprovalRequest) -> None:
        producer.track(request)
        self._queue.append((producer, request))
        if self.approval_dialog is None:
            self._next()

    def _next(self) -> None:
        while self._queue:
            producer, request = self._queue.pop(0)
            if request.future.done():
                continue
            dialog = ApprovalDialog(request.tool.server, request.tool.tool, request.call.arguments, self.page.window())
            dialog.decided.connect(lambda d, q=request: self._decided(q, d))
            self.approval_dialog = dialog
            self._dialog_producer = producer
            dialog.open()
            return

    def _decided(self, request: ApprovalRequest, decision) -> None:
        request.decide(decision)
        self.approval_dialog = None
        self._dialog_producer = None
        self._next()


__all__ = ["ToolsFeature", "ToolsPreparer"]
