"""The Chats page: the sidebar of chats, the chat itself, the composer and the chat settings."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QAbstractButton,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.answer_run import AnswerOutcome
from app.chat.chat_list_model import ChatListModel
from app.chat.controller import ChatController
from app.icons import icon
from app.net.local_models import LocalModels
from app.net.remote_types import ProviderInfo
from app.net.types import ModelInfo
from app.store import ChatSettings
from app.store.images import ImageRef
from app.store.records import ChatRecord
from app.theme import ThemeColors
from app.widgets.chat_settings import ChatSettingsPanel
from app.widgets.chat_sidebar import ChatSidebar
from app.widgets.chat_view import ChatView
from app.widgets.composer import Composer
from app.widgets.confirm import confirm
from app.widgets.elided_label import ElidedCombo, ElidedLabel
from app.widgets.split_column import SplitColumn

log = logging.getLogger(__name__)


class AttachmentSource(Protocol):
    """A feature whose attachments go with the next message of a chat (pictures)."""

    def pending(self, chat_id: int) -> tuple[ImageRef, ...]: ...

    def sent(self, chat_id: int) -> None: ...


def _least_width(panel: QWidget) -> int:
    """The least width a side panel takes beside the chat."""
    return max(panel.minimumWidth(), panel.minimumSizeHint().width())


def _keys(shortcut: QShortcut) -> str:
    """A shortcut's keys as this platform writes them (Ctrl+N, ⌘N)."""
    return shortcut.key().toString(QKeySequence.SequenceFormat.NativeText)


class ChatHeader(QFrame):
    """The chat's title and its controls on one row; when the row is too narrow for both, the title goes on a
    row of its own above the controls (elided there as well) and the controls stay whole."""

    TITLE_ROOM = 160  # the least width for the title beside the controls

    def __init__(self, title: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ChatHeader")
        self.title = title
        self.stacked = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(20, 10, 12, 10)
        outer.setSpacing(6)
        self.row = QHBoxLayout()  # the controls (and the title, while it fits beside them)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(6)
        self.row.addWidget(title, 1)
        outer.addLayout(self.row)

    def controls_width(self, *, preferred: bool = False) -> int:
        """The least width of the controls row without the title (``preferred``: the width they take when they
        have room, as beside the title)."""
        items = [self.row.itemAt(i) for i in range(self.row.count())]
        shown = [it for it in items if it.widget() is not self.title and not it.isEmpty()]
        widths = (max(it.sizeHint().width(), it.minimumSize().width()) if preferred else it.minimumSize().width() for it in shown)
        return sum(widths) + self.row.spacing() * max(0, len(shown) - 1)

    def arrange(self) -> None:
        """Title beside the controls, or above them, for the width the header has now."""
        margins = self.layout().contentsMargins()
        room = self.width() - margins.left() - margins.right()
        # the controls as wide as they are drawn, not their least: at their least the title was squeezed to "This…"
        stacked = room < self.controls_width(preferred=True) + self.row.spacing() + self.TITLE_ROOM
        if stacked == self.stacked:
            return
        self.stacked = stacked
        self.row.removeWidget(self.title)
        if stacked:
            self.layout().insertWidget(0, self.title)
            self.row.insertStretch(0, 1)  # the controls stay at the right
        else:
            self.row.takeAt(0)  # the stretch
            self.row.insertWidget(0, self.title, 1)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.arrange()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """As narrow as the controls: the title can always go above them."""
        margins = self.layout().contentsMargins()
        return QSize(self.controls_width() + margins.left() + margins.right(), super().minimumSizeHint().height())


class ChatsPage(QWidget):
    chat_opened = Signal(int)  # chat id: shown now (picked, new, or the next one after a delete)
    chat_model_changed = Signal(int, str)  # chat id, the model it now talks to
    pictures_received = Signal(object)  # QMimeData with pictures, pasted or dropped on the message box

    def __init__(self, controller: ChatController, models: LocalModels, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Page")
        self.controller = controller
        self.models = models
        self.colors = colors
        self.chat_id: int | None = None
        self._split_id: int | None = None  # side by side: the second column's chat
        self._attachment_sources: list[AttachmentSource] = []
        self._drafts: dict[int, str] = {}  # chat id -> what was typed there and not sent (the chat on screen's is in the composer)
        self.engine_ready = False
        self.list_model = ChatListModel(self)
        self.sidebar = ChatSidebar(self.list_model, colors)
        self.view = ChatView(colors, steps_source=controller.steps, picture_path=controller.picture_path)
        self.composer = Composer(colors)
        self.settings_panel = ChatSettingsPanel()
        self.settings_panel.hide()
        self._panel_toggles: dict[QWidget, QAbstractButton] = {}  # a side panel -> the button that opens it
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.sidebar)
        center = QVBoxLayout()
        center.setSpacing(0)
        center.addWidget(self._header())
        self._notices = QVBoxLayout()  # features' notices above the conversation (add_notice)
        self._notices.setContentsMargins(0, 0, 0, 0)
        center.addLayout(self._notices)
        self.split_column = SplitColumn(colors, controller.steps, picture_path=controller.picture_path)  # side by side: the second model's answers
        self.split_column.hide()
        main_column = QWidget()  # the chat's own column: over it, while split, the model it answers with
        main_layout = QVBoxLayout(main_column)
        main_layout.setContentsMargins(0, 0, 0, 0)
        main_layout.setSpacing(0)
        self.main_column_label = QLabel()
        self.main_column_label.setObjectName("Muted")
        self.main_column_label.setContentsMargins(20, 10, 12, 10)
        self.main_column_label.hide()
        main_layout.addWidget(self.main_column_label)
        main_layout.addWidget(self.view, 1)
        self.columns = QSplitter(Qt.Orientation.Horizontal)
        self.columns.setChildrenCollapsible(False)
        self.columns.addWidget(main_column)
        self.columns.addWidget(self.split_column)
        self.columns.setStretchFactor(0, 1)
        self.columns.setStretchFactor(1, 1)
        center.addWidget(self.columns, 1)
        center.addWidget(self.composer)
        row.addLayout(center, 1)
        row.addWidget(self.settings_panel)
        self._row = row
        self._center = center
        self._side_panels: list[QWidget] = []
        self._watch_side_panel(self.settings_panel)
        self._connect()
        self._shortcuts()
        self.refresh_list()
        chats = self.controller.chats()
        if chats:
            self.open_chat(chats[0].id)
        else:
            self.new_chat()

    def _header(self) -> QWidget:
        self.title = ElidedLabel()
        self.title.setObjectName("ChatTitle")
        header = ChatHeader(self.title)
        self.header = header
        row = header.row
        self._header_row = row
        self.model_combo = ElidedCombo(240, 80)
        self.model_combo.setObjectName("modelCombo")
        self.model_combo.setToolTip("The model this chat talks to")
        row.addWidget(self.model_combo)
        self.split_button = QToolButton()
        self.split_button.setObjectName("splitButton")
        self.split_button.setToolTip("Side by side: send each message to a second model too")
        self.split_button.setCheckable(True)
        self.split_button.setIconSize(QSize(18, 18))
        self.split_button.toggled.connect(self.set_split)
        row.addWidget(self.split_button)
        self.export_button = QToolButton()
        self.export_button.setToolTip("Export this chat as Markdown")
        self.export_button.setIconSize(QSize(18, 18))
        self.export_button.clicked.connect(lambda: self.export_chat(self.chat_id, "md") if self.chat_id else None)
        row.addWidget(self.export_button)
        self.settings_button = QToolButton()
        self.settings_button.setObjectName("chatSettingsButton")
        self.settings_button.setToolTip("System prompt, sampling and thinking")
        self.settings_button.setCheckable(True)
        self.settings_button.setIconSize(QSize(18, 18))
        self.settings_button.toggled.connect(self.settings_panel.setVisible)
        self._panel_toggles[self.settings_panel] = self.settings_button
        row.addWidget(self.settings_button)
        self._set_header_icons()
        return header

    # -- places for features -----------------------------------------------------------------------
    def add_header_button(self, button: QWidget) -> None:
        """A feature's button in the chat header, before the chat settings button."""
        self._header_row.insertWidget(self._header_row.indexOf(self.settings_button), button)

    def add_notice(self, widget: QWidget) -> None:
        """A feature's notice above the conversation (the feature shows and hides it)."""
        self._notices.addWidget(widget)

    def add_side_panel(self, widget: QWidget, toggle: QAbstractButton | None = None) -> None:
        """A feature's panel at the right of the chat (the feature shows and hides it; ``toggle``: its checkable
        button, which the page unchecks when it closes the panel to make room for another)."""
        self._row.addWidget(widget)
        self._watch_side_panel(widget)
        if toggle is not None:
            self._panel_toggles[widget] = toggle

    def _watch_side_panel(self, panel: QWidget) -> None:
        self._side_panels.append(panel)
        panel.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if watched in self._side_panels and event.type() in (QEvent.Type.ShowToParent, QEvent.Type.HideToParent):
            if event.type() == QEvent.Type.ShowToParent:
                self._make_room_for(watched)
            self._fit_chat_list()
        return super().eventFilter(watched, event)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit_chat_list()

    def _make_room_for(self, opened: QWidget) -> None:
        """Side panels that do not fit beside the chat together in the page's width (the chat list folded away):
        the one opened last stays and the others close, so that the window keeps its size on a small screen."""
        others = [p for p in self._side_panels if p is not opened and not p.isHidden()]
        need = self._center.minimumSize().width() + sum(_least_width(p) for p in [opened, *others])
        if not others or need <= self.width():
            return
        for panel in others:
            toggle = self._panel_toggles.get(panel)
            if toggle is not None and toggle.isChecked():
                toggle.setChecked(False)  # (its handler hides the panel)
            panel.hide()

    def _fit_chat_list(self) -> None:
        """The chat list folds away while the side panels open beside the chat leave it too little room (a small
        window or screen), so that the chat and the panels show whole; it comes back when they close."""
        panels = sum(_least_width(p) for p in self._side_panels if not p.isHidden())
        room = self.width() - self._center.minimumSize().width() - panels
        self.sidebar.setVisible(not panels or room >= self.sidebar.NARROWEST)

    def add_attachment(self, widget: QWidget) -> None:
        """A feature's control or attachments row in the composer, above the text box."""
        self.composer.add_attachment(widget)

    def add_attachment_source(self, source: AttachmentSource) -> None:
        """A feature whose attachments go with each message sent from the composer (pasted or dropped
        pictures come by :attr:`pictures_received`)."""
        self._attachment_sources.append(source)

    def apply_pending_edits(self) -> None:
        """Save the chat settings being edited now (before the window closes)."""
        self.settings_panel.apply_now()

    def _set_header_icons(self) -> None:
        self.export_button.setIcon(icon("export", self.colors.muted))
        self.split_button.setIcon(icon("split", self.colors.muted))
        self.settings_button.setIcon(icon("settings", self.colors.muted))

    def _shortcuts(self) -> None:
        """Ctrl+N: a new chat; Ctrl+F: the search box of the chat list (both while this page shows); Esc: stop the
        answer in progress (while the focus is on this page). The tooltips say so."""
        window = Qt.ShortcutContext.WindowShortcut  # a hidden page's shortcuts are off
        self.new_shortcut = QShortcut(QKeySequence(QKeySequence.StandardKey.New), self, self.new_chat, context=window)
        self.find_shortcut = QShortcut(QKeySequence(QKeySequence.StandardKey.Find), self, self.focus_search, context=window)
        self.stop_shortcut = QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self._stop_key,
                                       context=Qt.ShortcutContext.WidgetWithChildrenShortcut)  # fmt: skip
        self.sidebar.new_button.setToolTip(f"New chat ({_keys(self.new_shortcut)})")
        self.sidebar.search.setToolTip(f"Search chats ({_keys(self.find_shortcut)})")
        self.composer.stop_keys = _keys(self.stop_shortcut)

    def focus_search(self) -> None:
        self.sidebar.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.sidebar.search.selectAll()

    def _stop_key(self) -> None:
        if self.composer.answering:
            self.stop()

    def _connect(self) -> None:
        c = self.controller
        c.answer_started.connect(self._answer_started)
        c.answer_finished.connect(self._answer_finished)
        c.run_started.connect(self._run_started)
        c.chats_changed.connect(self.refresh_list)
        c.chat_deleted.connect(self._chat_deleted)
        self.sidebar.chat_selected.connect(self.open_chat)
        self.sidebar.new_chat_requested.connect(self.new_chat)
        self.sidebar.search_changed.connect(lambda _q: self.refresh_list())
        self.sidebar.delete_requested.connect(self.confirm_delete)
        self.sidebar.export_requested.connect(self.export_chat)
        self.list_model.rename_requested.connect(self.rename_chat)
        self.composer.send_requested.connect(self.send)
        self.composer.stop_requested.connect(self.stop)
        self.composer.input.pictures_received.connect(self.pictures_received)
        self.split_column.model_chosen.connect(self._split_model_chosen)
        self.split_column.view.edit_submitted.connect(lambda mid, text: self._in_split(self.controller.edit_and_resend, mid, text))
        self.split_column.view.regenerate_clicked.connect(lambda: self._in_split(self.controller.regenerate))
        self.split_column.view.continue_clicked.connect(lambda: self._in_split(self.controller.continue_answer))
        self.split_column.view.branch_requested.connect(lambda mid, step: self._in_split(self.controller.switch_branch, mid, step))
        self.view.edit_submitted.connect(lambda mid, text: self.controller.edit_and_resend(self.chat_id, mid, text))
        self.view.regenerate_clicked.connect(lambda: self.controller.regenerate(self.chat_id))
        self.view.continue_clicked.connect(lambda: self.controller.continue_answer(self.chat_id))
        self.view.branch_requested.connect(lambda mid, step: self.controller.switch_branch(self.chat_id, mid, step))
        self.view.fork_requested.connect(self.fork_chat)
        self.settings_panel.settings_changed.connect(self._settings_edited)
        self.model_combo.activated.connect(self._model_chosen)
        self.models.changed.connect(self._models_changed)
        self.models.remote_changed.connect(self._remotes_changed)

    # -- chats --------------------------------------------------------------------------------
    def refresh_list(self) -> None:
        self.list_model.set_chats(self.controller.chats(self.sidebar.search.text()))
        for chat_id in self.controller.answering_chats():
            self.list_model.set_answering(chat_id, True)
        if self.chat_id is not None:
            self.sidebar.select_chat(self.chat_id)

    def new_chat(self) -> None:
        """Open a new chat (the current one, if it is still empty), with the current chat's model."""
        current = self.controller.chat(self.chat_id) if self.chat_id is not None else None
        if current is not None and not self.controller.conversation(current.id).rowCount():
            self.sidebar.search.clear()
            self.composer.input.setFocus()
            return
        settings = ChatSettings(model=current.settings.model) if current else ChatSettings()
        known = self.models.get(settings.model) or self.models.provider_of(settings.model)
        if not known and self.models.models and (current is None or self.models.remotes_known):
            settings = ChatSettings(model=self.models.models[0].name)  # that model is gone (a removed provider)
        chat = self.controller.create_chat(settings)
        self.sidebar.search.clear()
        self.open_chat(chat.id)
        self.composer.input.setFocus()

    def open_chat(self, chat_id: int) -> None:
        chat = self.controller.chat(chat_id)
        if chat is None:
            return
        if self.chat_id is not None and self.chat_id != chat_id:
            self.settings_panel.apply_now()  # pending edits belong to the chat being left
        if self.chat_id != chat_id:
            self._swap_draft(chat_id)
        self.chat_id = chat_id
        self.view.set_model(self.controller.conversation(chat_id))
        self.title.setText(chat.title)
        self.settings_panel.set_settings(chat.settings)
        self._fill_models(chat.settings.model)
        self._show_model(chat.settings.model)
        self._show_split(self.controller.split_companion(chat_id))
        self._update_answering()
        self.sidebar.select_chat(chat_id)
        self.chat_opened.emit(chat_id)

    def _swap_draft(self, chat_id: int) -> None:
        """Keep the unsent text of the chat being left, and show the one of ``chat_id`` (none for a new chat)."""
        text = self.composer.input.toPlainText()
        if self.chat_id is not None and text:
            self._drafts[self.chat_id] = text
        elif self.chat_id is not None:
            self._drafts.pop(self.chat_id, None)
        self.composer.input.setPlainText(self._drafts.pop(chat_id, ""))
        self.composer.input.moveCursor(QTextCursor.MoveOperation.End)

    def fork_chat(self, message_id: int) -> None:
        """Open a new chat with this one's conversation up to ``message_id``."""
        if self.chat_id is None:
            return
        fork = self.controller.fork(self.chat_id, message_id)
        if fork is not None:
            self.sidebar.search.clear()
            self.open_chat(fork.id)

    def rename_chat(self, chat_id: int, title: str) -> None:
        chat = self.controller.rename(chat_id, title)
        if chat_id == self.chat_id:
            self.title.setText(chat.title)

    def confirm_delete(self, chat_id: int) -> None:
        chat = self.controller.chat(chat_id)
        if chat is None:
            return
        confirm(self, "Delete chat", f"Delete “{chat.title}” and all its messages?", "Delete", lambda: self.delete_chat(chat_id))

    def delete_chat(self, chat_id: int) -> None:
        self.controller.delete(chat_id)

    def _chat_deleted(self, chat_id: int) -> None:
        self._drafts.pop(chat_id, None)
        if chat_id == self.chat_id:  # the next chat of the list shows, or a new one
            self.chat_id = None
            rest = self.controller.chats()
            self.open_chat(rest[0].id) if rest else self.new_chat()

    def export_chat(self, chat_id: int, fmt: str) -> None:
        chat = self.controller.chat(chat_id)
        if chat is None:
            return
        suffix = "md" if fmt == "md" else "json"
        kind = "Markdown (*.md)" if fmt == "md" else "JSON (*.json)"
        safe = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in chat.title).strip() or "chat"
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", f"{safe}.{suffix}", kind)
        if path:
            self.write_export(chat_id, Path(path), fmt)

    def write_export(self, chat_id: int, path: Path, fmt: str) -> None:
        text = self.controller.export_text(chat_id, fmt)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            QMessageBox.warning(self, "Export failed", f"Could not write {path}: {exc.strerror}. Choose another folder.")

    # -- side by side ---------------------------------------------------------------------------
    @property
    def split_chat_id(self) -> int | None:
        """The second column's chat, while the chat on screen is split side by side."""
        return self._split_id

    def set_split(self, on: bool) -> None:
        """Split the chat on screen side by side with a second model (another model where there is one)."""
        if self.chat_id is None or on == (self._split_id is not None):
            return
        if on:
            chat = self.controller.chat(self.chat_id)
            others = [name for _label, name in self._model_choices() if name != chat.settings.model]
            self.settings_panel.apply_now()
            self._show_split(self.controller.start_split(self.chat_id, others[0] if others else chat.settings.model))
        else:
            self.controller.end_split(self.chat_id)
            self._show_split(None)

    def _show_split(self, companion: ChatRecord | None) -> None:
        self._split_id = companion.id if companion is not None else None
        self.split_button.blockSignals(True)
        self.split_button.setChecked(companion is not None)
        self.split_button.blockSignals(False)
        self.split_column.setVisible(companion is not None)
        self.main_column_label.setVisible(companion is not None)
        if companion is None:
            self.split_column.view.set_model(None)
            return
        chat = self.controller.chat(self.chat_id) if self.chat_id is not None else None
        self.main_column_label.setText(f"This chat's model: {chat.settings.model}" if chat is not None else "")
        self.split_column.view.set_model(self.controller.conversation(companion.id))
        self.split_column.view.set_empty_text(f"<p>The same messages go to <b>{companion.settings.model}</b> here.</p>")
        self.split_column.fill_models(self._model_choices(), companion.settings.model)
        self._even_columns()
        QTimer.singleShot(0, self, self._even_columns)  # again once the page has its width

    def _even_columns(self) -> None:
        half = max(1, self.columns.width() // 2)
        self.columns.setSizes([half, half])

    def _split_model_chosen(self, name: str) -> None:
        companion = self.controller.chat(self._split_id) if self._split_id is not None else None
        if companion is not None and name:
            self.controller.update_settings(companion.id, replace(companion.settings, model=name))

    def _in_split(self, action, *args) -> None:
        if self._split_id is not None:
            action(self._split_id, *args)

    def _run_started(self, run) -> None:
        view = self.split_column.view if run.chat_id == self._split_id else self.view
        run.steps_changed.connect(view.refresh_steps)

    # -- sending ------------------------------------------------------------------------------
    def send(self, text: str) -> None:
        if self.chat_id is None:
            return
        self.settings_panel.apply_now()
        if self._split_id is not None:  # the second column keeps the chat's settings, with its model
            self.controller.match_split(self.chat_id)
            if self.controller.is_answering(self._split_id):
                self.composer.input.setPlainText(text)
                return
        chat_id = self.chat_id
        images = tuple(ref for source in self._attachment_sources for ref in source.pending(chat_id))
        if not self.controller.send(chat_id, text, images=images):
            self.composer.input.setPlainText(text)
            return
        for source in self._attachment_sources:
            source.sent(chat_id)
        if self._split_id is not None:
            self.controller.send(self._split_id, text, images=images)

    def stop(self) -> None:
        for chat_id in (self.chat_id, self._split_id):
            if chat_id is not None:
                self.controller.stop(chat_id)

    def _update_answering(self) -> None:
        main = self.chat_id is not None and self.controller.is_answering(self.chat_id)
        split = self._split_id is not None and self.controller.is_answering(self._split_id)
        self.composer.set_answering(main or split)
        self.view.set_actions_enabled(not main)
        self.split_column.view.set_actions_enabled(not split)

    def _answer_started(self, chat_id: int) -> None:
        self.list_model.set_answering(chat_id, True)
        if chat_id in (self.chat_id, self._split_id):
            self._update_answering()
        if chat_id == self.chat_id:
            chat = self.controller.chat(chat_id)
            self.title.setText(chat.title if chat else "")

    def _answer_finished(self, outcome: AnswerOutcome) -> None:
        self.list_model.set_answering(outcome.chat_id, False)
        if outcome.chat_id in (self.chat_id, self._split_id):
            self._update_answering()

    def _settings_edited(self, settings: ChatSettings) -> None:
        """The panel's part of the settings (prompt, sampling, thinking); the chat's other settings stay as stored."""
        chat = self.controller.chat(self.chat_id) if self.chat_id is not None else None
        if chat is not None:
            merged = replace(chat.settings, system_prompt=settings.system_prompt, sampling=settings.sampling,
                             thinking=settings.thinking)  # fmt: skip
            self.controller.update_settings(chat.id, merged)

    # -- models -------------------------------------------------------------------------------
    def _model_choices(self) -> list[tuple[str, str]]:
        """(label, model id) of every model a chat can use: the worker's, then the providers'."""
        choices = [(name, name) for name in self.models.names()]
        choices += [(f"{m.remote_id} — {m.provider}", m.id) for m in self.models.remote_models()]
        return choices

    def _fill_models(self, selected: str) -> None:
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        names = self.models.names()
        for name in names:
            info = self.models.get(name)
            sees = [c for c in (info.capabilities if info is not None else ()) if c in ("vision", "audio")]
            self.model_combo.addItem(f"{name} · {' & '.join(sees)}" if sees else name, name)
        remote = self.models.remote_models()
        for m in remote:
            # Marked with its provider; the chat stores the full provider/model id.
            self.model_combo.addItem(f"{m.remote_id} — {m.provider}", m.id)
            self.model_combo.setItemData(self.model_combo.count() - 1, f"{m.id}, served by {m.provider}", Qt.ItemDataRole.ToolTipRole)
        available = set(names) | {m.id for m in remote}
        if selected not in available:
            self.model_combo.addItem(f"{selected} (not available)" if available else selected, selected)
        self.model_combo.setCurrentIndex(self.model_combo.findData(selected))
        self.model_combo.blockSignals(False)

    def _models_changed(self, models: list[ModelInfo]) -> None:
        self.controller.learn_models(models)
        self._refill()

    def _remotes_changed(self, providers: list[ProviderInfo]) -> None:
        # A provider that says how long its context is (vLLM's max_model_len) bounds the history sent.
        self.controller.learn_models(
            [ModelInfo(name=m.id, context_length=m.context_length) for p in providers for m in p.models if m.context_length]
        )
        self._refill()

    def _refill(self) -> None:
        chat = self.controller.chat(self.chat_id) if self.chat_id is not None else None
        if chat is not None:
            self._fill_models(chat.settings.model)
            self._show_model(chat.settings.model)
        companion = self.controller.chat(self._split_id) if self._split_id is not None else None
        if companion is not None:
            self.split_column.fill_models(self._model_choices(), companion.settings.model)

    def _show_model(self, model: str) -> None:
        """What depends on the chat's model: the empty chat's line, and the thinking switch where it can think."""
        info = self.models.get(model)
        # only a local model whose chat template thinks is offered the switch (a provider's model says nothing)
        self.settings_panel.set_thinking_offered(info is not None and "thinking" in info.capabilities)
        self._set_empty_text(model)

    def _set_empty_text(self, model: str) -> None:
        provider = self.models.provider_of(model)
        if provider is None:
            where = "running on this computer. Nothing leaves it."
        else:
            where = f"running on <b>{provider.name}</b> ({provider.url}); your messages are sent there."
        self.view.set_empty_text(f"<h2>What can I help with?</h2><p>Answers come from <b>{model}</b>, {where}</p>")

    def _model_chosen(self, index: int) -> None:
        name = self.model_combo.itemData(index)
        if self.chat_id is None or not name:
            return
        chat = self.controller.chat(self.chat_id)
        settings = replace(chat.settings, model=name)
        self.controller.update_settings(self.chat_id, settings)
        self.settings_panel.set_settings(settings)
        self._show_model(name)
        self.main_column_label.setText(f"This chat's model: {name}")
        self.chat_model_changed.emit(self.chat_id, name)

    # -- engine and theme ---------------------------------------------------------------------
    def set_engine_ready(self, ready: bool, message: str = "") -> None:
        self.engine_ready = ready
        self.composer.set_engine_ready(ready, message)

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.view.set_colors(colors)
        self.split_column.view.set_colors(colors)
        self.composer.set_colors(colors)
        self.sidebar.set_colors(colors)
        self._set_header_icons()
