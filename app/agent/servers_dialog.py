"""The MCP servers dialog: add a server (stdio command or streamable-HTTP URL), import an mcp.json,
switch each tool on or off, choose the servers this chat uses and whether it calls a tool first, and
revoke the tools always allowed."""

from __future__ import annotations

import shlex
from typing import Protocol

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.agent.service import AgentService
from app.units import counted
from engine.agent import McpConfigError, McpServerConfig, McpServerFailed

EMPTY_TEXT = (
    "No tools yet. Add an MCP server, or import an mcp.json (Claude Desktop's, Cursor's), to let the model "
    "call its tools in chats."
)


def _pairs(text: str, sep: str) -> tuple[tuple[str, str], ...]:
    out = []
    for line in text.splitlines():
        if line.strip():
            key, _, value = line.partition(sep)
            out.append((key.strip(), value.strip()))
    return tuple(out)


class AddServerDialog(QDialog):
    """One server's fields; :meth:`config` builds it (McpConfigError says what is wrong)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("addMcpServerDialog")
        self.setWindowTitle("Add an MCP server")
        form = QFormLayout(self)
        self.name = QLineEdit()
        self.kind = QComboBox()
        self.kind.addItems(["Command (stdio)", "URL (streamable HTTP)"])
        self.command = QLineEdit()
        self.command.setPlaceholderText("npx -y @modelcontextprotocol/server-filesystem ~/Documents")
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("KEY=value, one a line (kept in the keyring)")
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://example.com/mcp")
        self.headers = QPlainTextEdit()
        self.headers.setPlaceholderText("Authorization: Bearer …, one a line (kept in the keyring)")
        for w in (self.env, self.headers):
            w.setMaximumHeight(70)
        form.addRow("Name", self.name)
        form.addRow("Kind", self.kind)
        form.addRow("Command", self.command)
        form.addRow("Environment", self.env)
        form.addRow("URL", self.url)
        form.addRow("Headers", self.headers)
        self.error = QLabel()
        self.error.setObjectName("ErrorText")
        self.error.setWordWrap(True)
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._ok)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self._kind_changed(0)
        self.result_config: McpServerConfig | None = None

    def _kind_changed(self, index: int) -> None:
        for w in (self.command, self.env):
            w.setEnabled(index == 0)
        for w in (self.url, self.headers):
            w.setEnabled(index == 1)

    def config(self) -> McpServerConfig:
        name = self.name.text().strip()
        if self.kind.currentIndex() == 0:
            try:
                words = shlex.split(self.command.text())
            except ValueError as exc:
                raise McpConfigError(f"The command cannot be read ({exc}); check its quotes.") from exc
            if not words:
                raise McpConfigError("Type the command that starts the server.")
            return McpServerConfig(name=name, command=words[0], args=tuple(words[1:]), env=_pairs(self.env.toPlainText(), "="))
        return McpServerConfig(name=name, url=self.url.text().strip() or None, headers=_pairs(self.headers.toPlainText(), ":"))

    def _ok(self) -> None:
        try:
            self.result_config = self.config()
        except McpConfigError as exc:
            self.error.setText(str(exc))
            return
        self.accept()


class ChatTools(Protocol):
    """Where a chat's MCP servers and tool-first flag are kept (its settings in the chat store)."""

    def chat_servers(self, chat_id: int) -> list[str]: ...

    def set_chat_servers(self, chat_id: int, names: list[str]) -> None: ...

    def tool_first(self, chat_id: int) -> bool: ...

    def set_tool_first(self, chat_id: int, on: bool) -> None: ...


class McpServersDialog(QDialog):
    """Servers for ``chat_id`` (checked: this chat uses it), their tools, the always-allowed list."""

    changed = Signal()
    _probed = Signal(str, object)  # server name, the probe's future (from the agent's thread)

    def __init__(self, agent: AgentService, chat_id: int | None, chat_tools: ChatTools, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mcpServersDialog")
        self.setWindowTitle("Tools (MCP servers)")
        self.resize(620, 560)
        self.agent = agent
        self.chat_id = chat_id
        self.chat_tools = chat_tools
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("MCP servers — checked ones are used in this chat:"))
        self.empty = QLabel(EMPTY_TEXT)  # until a server is added: what to do first
        self.empty.setObjectName("mcpEmpty")
        self.empty.setProperty("muted", True)
        self.empty.setWordWrap(True)
        layout.addWidget(self.empty)
        self.servers = QListWidget()
        self.servers.setObjectName("mcpServerList")
        layout.addWidget(self.servers)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add…")
        self.import_button = QPushButton("Import mcp.json…")
        self.import_button.setObjectName("importMcpJson")
        self.tools_button = QPushButton("List tools")
        self.remove_button = QPushButton("Remove")
        for b in (self.add_button, self.import_button, self.tools_button, self.remove_button):
            row.addWidget(b)
        layout.addLayout(row)
        self.status = QLabel()
        self.status.setTextFormat(Qt.TextFormat.PlainText)  # a server's stderr is untrusted text
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        layout.addWidget(QLabel("Tools of the selected server (unchecked: never offered to the model):"))
        self.tools = QListWidget()
        self.tools.setObjectName("mcpToolList")
        layout.addWidget(self.tools)
        layout.addWidget(QLabel("Always allowed (select and revoke):"))
        self.always = QListWidget()
        self.always.setObjectName("alwaysAllowedList")
        self.always.setMaximumHeight(90)
        layout.addWidget(self.always)
        self.revoke_button = QPushButton("Revoke")
        layout.addWidget(self.revoke_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.tool_first = QCheckBox("Make the model call a tool before it answers")
        self.tool_first.setObjectName("toolFirstSwitch")
        layout.addWidget(self.tool_first)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout.addWidget(close)
        self.add_button.clicked.connect(self.add_server)
        self.import_button.clicked.connect(self.choose_import)
        self.tools_button.clicked.connect(self.list_tools)
        self.remove_button.clicked.connect(self.remove_selected)
        self.revoke_button.clicked.connect(self.revoke_selected)
        self.servers.itemChanged.connect(self._server_checked)
        self.servers.currentItemChanged.connect(lambda *_a: self._show_failure())
        self.servers.currentItemChanged.connect(lambda *_a: self._update_actions())
        self.always.currentItemChanged.connect(lambda *_a: self._update_actions())
        self.tools.itemChanged.connect(self._tool_checked)
        self.tool_first.toggled.connect(
            lambda on: self.chat_tools.set_tool_first(self.chat_id, on) if self.chat_id is not None else None
        )
        self._probed.connect(self._show_tools)
        self.failed: dict[str, McpServerFailed] = {}  # this chat's servers that are down, by name
        self.refresh()

    # -- lists --------------------------------------------------------------------------------
    def refresh(self) -> None:
        used = set(self.chat_tools.chat_servers(self.chat_id)) if self.chat_id is not None else set()
        self.failed = {f.server: f for f in self.agent.failures(self.chat_id)} if self.chat_id is not None else {}
        self.servers.blockSignals(True)
        self.servers.clear()
        for s in self.agent.servers.servers():
            failure = self.failed.get(s.name)
            stopped = f" (stopped: {failure.reason})" if failure is not None else ""
            item = QListWidgetItem(f"{s.name}{stopped} — {s.describe()}")
            if failure is not None:
                item.setToolTip(failure.stderr or failure.reason)
            item.setData(Qt.ItemDataRole.UserRole, s.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if s.name in used else Qt.CheckState.Unchecked)
            self.servers.addItem(item)
        self.servers.blockSignals(False)
        self.always.clear()
        self.always.addItems(self.agent.servers.always_allowed())
        if self.chat_id is not None:
            self.tool_first.blockSignals(True)
            self.tool_first.setChecked(self.chat_tools.tool_first(self.chat_id))
            self.tool_first.blockSignals(False)
        self.empty.setVisible(self.servers.count() == 0)
        self._update_actions()

    def _update_actions(self) -> None:
        """List tools and Remove act on the selected server, Revoke on the selected always-allowed tool."""
        server = self.servers.currentItem() is not None
        self.tools_button.setEnabled(server)
        self.remove_button.setEnabled(server)
        self.revoke_button.setEnabled(self.always.currentItem() is not None)

    def server_names(self) -> list[str]:
        return [self.servers.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.servers.count())]

    def _selected(self) -> str | None:
        item = self.servers.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def set_used(self, name: str, used: bool) -> None:
        for i in range(self.servers.count()):
            item = self.servers.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == name:
                item.setCheckState(Qt.CheckState.Checked if used else Qt.CheckState.Unchecked)

    def _show_failure(self) -> None:
        """A stopped server, when selected, shows why and what it wrote on stderr."""
        failure = self.failed.get(self._selected() or "")
        if failure is not None:
            self.status.setText(f"{failure.server} stopped: {failure.reason}\n{failure.stderr}".strip())

    def _server_checked(self, _item: QListWidgetItem) -> None:
        if self.chat_id is None:
            return
        names = [
            self.servers.item(i).data(Qt.ItemDataRole.UserRole)
            for i in range(self.servers.count())
            if self.servers.item(i).checkState() == Qt.CheckState.Checked
        ]
        self.chat_tools.set_chat_servers(self.chat_id, names)
        self.changed.emit()

    # -- actions ------------------------------------------------------------------------------
    def add_server(self) -> None:
        dialog = AddServerDialog(self)
        if dialog.exec() and dialog.result_config is not None:
            self.save(dialog.result_config)

    def save(self, config: McpServerConfig) -> None:
        self.agent.servers.save(config)
        self.refresh()
        self.changed.emit()

    def choose_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", "", "mcp.json (*.json);;All files (*)")
        if path:
            self.import_file(path)

    def confirm_replace(self, names: tuple[str, ...]) -> bool:
        """Ask before an import replaces saved servers (their always-allowed tools are cleared)."""
        listed = ", ".join(names)
        answer = QMessageBox.question(
            self,
            "Replace MCP servers?",
            f"This file replaces the saved server{'s' if len(names) > 1 else ''} {listed}. "
            "Tools you chose to always allow for them will ask again. Replace?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )
        return answer == QMessageBox.StandardButton.Yes

    def import_file(self, path: str) -> list[McpServerConfig]:
        try:
            servers = self.agent.servers.import_file(path, confirm=self.confirm_replace)
        except McpConfigError as exc:
            self.status.setText(str(exc))
            return []
        self.status.setText(f"Imported {len(servers)} server{'s' if len(servers) != 1 else ''}: "
                            + ", ".join(s.name for s in servers))  # fmt: skip
        self.refresh()
        self.changed.emit()
        return servers

    def remove_selected(self) -> None:
        name = self._selected()
        if name:
            self.agent.servers.remove(name)
            self.tools.clear()
            self.refresh()
            self.changed.emit()

    def revoke_selected(self) -> None:
        item = self.always.currentItem()
        if item is not None:
            self.agent.servers.set_always_allowed(item.text(), False)
            self.refresh()

    def list_tools(self) -> None:
        """Start the selected server on its own and list its tools (a failure shows its stderr)."""
        name = self._selected()
        config = self.agent.servers.get(name) if name else None
        if config is None:
            return
        self.status.setText(f"Starting {name}…")
        self.tools.clear()

        async def probe():
            hub = await self.agent.probe(config)
            try:
                conn = hub.connections[0]
                return [(t.name, t.description or "") for t in conn.tools], hub.failures()
            finally:
                await hub.close()

        run = self.agent.runtime.start(probe())
        self._probe = run
        run.future.add_done_callback(lambda f: self._probed.emit(name, f))

    def _show_tools(self, name: str, future) -> None:
        try:
            tools, failures = future.result()
        except Exception as exc:  # the probe itself broke: say so, the dialog stays usable
            self.status.setText(f"{name} could not be started: {exc}")
            return
        if failures:
            f = failures[0]
            self.status.setText(f"{name} is not running: {f.reason}\n{f.stderr}".strip())
            return
        config = self.agent.servers.get(name)
        off = config.disabled_tools if config else frozenset()
        self.status.setText(f"{name}: {counted(len(tools), 'tool')}")
        self.tools.blockSignals(True)
        for tool, description in tools:
            item = QListWidgetItem(f"{tool} — {description[:120]}")
            item.setData(Qt.ItemDataRole.UserRole, (name, tool))
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Unchecked if tool in off else Qt.CheckState.Checked)
            self.tools.addItem(item)
        self.tools.blockSignals(False)

    def _tool_checked(self, item: QListWidgetItem) -> None:
        server, tool = item.data(Qt.ItemDataRole.UserRole)
        config = self.agent.servers.get(server)
        if config is not None:
            self.agent.servers.save(config.with_tool(tool, item.checkState() == Qt.CheckState.Checked))
            self.changed.emit()


__all__ = ["AddServerDialog", "McpServersDialog"]
