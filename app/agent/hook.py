"""Puts the agent into the main window: the Tools button of the chat header, the notice of a chat's
MCP server that stopped (with its stderr), the approval dialog, and the thinking and tool-call cards
of answers in the chat view."""

from __future__ import annotations

from PySide6.QtCore import QObject, QSize, Qt
from PySide6.QtWidgets import QLabel, QLayout, QToolButton, QWidget

from app.agent.agent_run import AgentAnswerRun, ApprovalRequest
from app.agent.servers_dialog import McpServersDialog
from app.agent.service import AgentService
from app.agent.steps import import_legacy_steps
from app.agent.widgets import ApprovalDialog

STDERR_LINES = 6  # of a stopped server's stderr, in the chat's notice


def _layout_holding(layout: QLayout, widget: QWidget) -> QLayout | None:
    if layout.indexOf(widget) >= 0:
        return layout
    for i in range(layout.count()):
        child = layout.itemAt(i).layout()
        found = _layout_holding(child, widget) if child is not None else None
        if found is not None:
            return found
    return None


class AgentUi(QObject):
    """The window's agent parts (tests reach the dialogs through it)."""

    def __init__(self, window, agent: AgentService) -> None:
        super().__init__(window)
        self.window = window
        self.agent = agent
        self.runs: dict[int, object] = {}  # answer message id -> its AgentAnswerRun or AnswerRun
        self.approval_dialog: ApprovalDialog | None = None
        self.servers_dialog: McpServersDialog | None = None
        self._queue: list[tuple[AgentAnswerRun, ApprovalRequest]] = []
        chats = window.chats
        chats.view.steps_source = self.steps_for
        self.tools_button = QToolButton()
        self.tools_button.setObjectName("mcpToolsButton")
        self.tools_button.setText("Tools")
        self.tools_button.setToolTip("MCP servers this chat may use, and the model's thinking")
        self.tools_button.setIconSize(QSize(18, 18))
        self.tools_button.clicked.connect(self.open_servers)
        header = chats.settings_button.parentWidget().layout()
        header.insertWidget(header.indexOf(chats.settings_button), self.tools_button)
        self.server_notice = QLabel()  # a server of this chat that stopped, with its stderr
        self.server_notice.setObjectName("Notice")
        self.server_notice.setStyleSheet("QLabel { margin: 8px 20px 0 20px; }")  # in line with the chat
        self.server_notice.setTextFormat(Qt.TextFormat.PlainText)  # stderr is untrusted text
        self.server_notice.setWordWrap(True)
        self.server_notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.server_notice.hide()
        column = _layout_holding(chats.layout(), chats.view)
        if column is not None:
            column.insertWidget(column.indexOf(chats.view), self.server_notice)
        window.controller.run_started.connect(self._run_started)
        agent.server_state_changed.connect(self._server_state_changed)
        self.update_button()

    def steps_for(self, message_id: int):
        """An answer's steps: a running answer's as they grow, else those kept in the chat store."""
        run = self.runs.get(message_id)
        if run is None:
            return self.window.store.steps(message_id)
        return run.steps if isinstance(run, AgentAnswerRun) else run.thinking

    def update_button(self) -> None:
        """The Tools button and the stopped-server notice, for the chat on screen."""
        chat_id = self.window.chats.chat_id
        n = len(self.agent.chat_servers(chat_id)) if chat_id is not None else 0
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
        if chat_id == self.window.chats.chat_id:
            self.update_button()
        if self.servers_dialog is not None and self.servers_dialog.chat_id == chat_id:
            self.servers_dialog.refresh()

    def open_servers(self) -> McpServersDialog:
        dialog = McpServersDialog(self.agent, self.window.chats.chat_id, self.window)
        dialog.changed.connect(self.update_button)
        self.servers_dialog = dialog
        dialog.open()
        return dialog

    # -- runs ---------------------------------------------------------------------------------
    def _run_started(self, run) -> None:
        mid = run.answer.id
        if not isinstance(run, AgentAnswerRun):  # a plain answer: only its thinking
            self.runs[mid] = run
            run.steps_changed.connect(self._steps_changed)
            run.finished.connect(lambda _o, m=mid, r=run: self._plain_finished(m, r))
            return
        self.runs[mid] = run
        run.approval_needed.connect(lambda request, r=run: self._ask(r, request))
        run.steps_changed.connect(self._steps_changed)
        run.finished.connect(lambda _o, m=mid, r=run: self._finished(m, r))

    def _plain_finished(self, message_id: int, run) -> None:
        self.runs.pop(message_id, None)  # its thinking is in the chat store with its text
        self.window.chats.view.refresh_steps(message_id)

    def _steps_changed(self, message_id: int) -> None:
        self.window.chats.view.refresh_steps(message_id)

    def _finished(self, message_id: int, run: AgentAnswerRun) -> None:
        self.runs.pop(message_id, None)
        self._queue = [(r, q) for r, q in self._queue if r is not run]
        if self.approval_dialog is not None and getattr(self.approval_dialog, "run", None) is run:
            self.approval_dialog.close()
            self.approval_dialog = None
            self._next()
        self.window.chats.view.refresh_steps(message_id)

    def _ask(self, run: AgentAnswerRun, request: ApprovalRequest) -> None:
        run.track(request)
        self._queue.append((run, request))
        if self.approval_dialog is None:
            self._next()

    def _next(self) -> None:
        while self._queue:
            run, request = self._queue.pop(0)
            if request.future.done():
                continue
            dialog = ApprovalDialog(request.tool.server, request.tool.tool, request.call.arguments, self.window)
            dialog.run = run
            dialog.decided.connect(lambda d, q=request: self._decided(q, d))
            self.approval_dialog = dialog
            dialog.open()
            return

    def _decided(self, request: ApprovalRequest, decision) -> None:
        request.decide(decision)
        self.approval_dialog = None
        self._next()


def install_agent(window) -> AgentService:
    """The window's AgentService (data beside the chat store), wired into its chat page."""
    folder = window.store.path.parent
    import_legacy_steps(folder, window.store)
    agent = AgentService(folder, parent=window)
    window.controller.agent = agent
    window.agent_ui = AgentUi(window, agent)
    window.chats.sidebar.chat_selected.connect(lambda _id: window.agent_ui.update_button())
    return agent


__all__ = ["AgentUi", "install_agent"]
