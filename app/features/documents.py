"""Documents in a chat: the Docs button of the chat header, a side panel to attach collections (add a
folder, indexing progress with pause and cancel, failed files), and the sources of the last answer with
their scores; activating a source opens the file at its page.

A chat's attached collections go with each of its requests (``"hearth": {"collections": [...]}``, by the
:class:`DocumentsPreparer`); the worker retrieves the passages, gives them to the model and sends them
back with the answer, which keeps them in the chat store. The collections attached to each chat are
kept there too: a chat opened again, after a restart too, has both back.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QSize, Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QToolButton,
    QVBoxLayout,
)

from app.chat.answer_run import AnswerOutcome, AnswerRun
from app.chat.controller import ChatController
from app.chat.preparers import AnswerRequest
from app.net.api import HearthApi
from app.net.types import ApiError
from app.pages.chats_page import ChatsPage
from app.store.records import DocSource
from app.units import counted
from engine.server.api_models import DocCollection as CollectionAnswer
from engine.server.api_models import HearthRequest

log = logging.getLogger(__name__)

POLL_MS = 1000
EMPTY_TEXT = "No documents yet. Add a folder to search its documents in chats."
_CITE = re.compile(r"\[(\d{1,3})\]")


@dataclass(frozen=True, slots=True)
class DocCollection:
    name: str
    files: int
    chunks: int
    embedded: int
    failed: tuple[tuple[str, str], ...]
    phase: str | None
    paused: bool

    @classmethod
    def from_answer(cls, c: CollectionAnswer) -> DocCollection:
        """The panel's view of one collection of ``GET /api/docs/collections``."""
        p = c.progress
        failed = tuple((f.path, f.reason) for f in c.failed)
        return cls(c.name, c.files, c.chunks, c.embedded, failed, p.phase if p else None, bool(p and p.paused))

    @property
    def indexing(self) -> bool:
        return self.phase in ("queued", "scanning", "parsing", "embedding")

    @property
    def summary(self) -> str:
        text = f"{self.name} — {counted(self.files, 'file')}, {counted(self.chunks, 'chunk')}"
        if self.indexing:
            text += f", indexing ({self.phase}{', paused' if self.paused else ''})"
        elif self.embedded < self.chunks:
            text += f", {self.chunks - self.embedded} to embed"
        if self.failed:
            text += f", {len(self.failed)} failed"
        return text


class DocsPanel(QFrame):
    """The side panel: collections (checked ones are attached to the chat) and the sources of the last answer."""

    def __init__(self, ui: DocumentsFeature) -> None:
        super().__init__()
        self.ui = ui
        self.setObjectName("DocsPanel")
        self.setMinimumWidth(300)
        self.setMaximumWidth(380)
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<b>Documents</b> — checked collections answer this chat"))
        self.empty = QLabel(EMPTY_TEXT)  # until there is a collection: what to do first
        self.empty.setObjectName("docsEmpty")
        self.empty.setProperty("muted", True)
        self.empty.setWordWrap(True)
        col.addWidget(self.empty)
        self.collections = QListWidget()
        self.collections.setObjectName("docsCollections")
        self.collections.itemChanged.connect(self._item_changed)
        self.collections.currentItemChanged.connect(lambda *_a: self._update_actions())
        col.addWidget(self.collections, 1)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add folder…")
        self.add_button.clicked.connect(self._choose_folder)
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(lambda: self.ui.control("resume" if self._selected_paused() else "pause"))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(lambda: self.ui.control("cancel"))
        for b in (self.add_button, self.pause_button, self.cancel_button):
            buttons.addWidget(b)
        self.pause_button.setEnabled(False)  # they act on a collection being indexed
        self.cancel_button.setEnabled(False)
        col.addLayout(buttons)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setObjectName("docsStatus")
        col.addWidget(self.status)
        col.addWidget(QLabel("<b>Sources</b> of the last answer (double-click opens)"))
        self.sources = QListWidget()
        self.sources.setObjectName("docsSources")
        self.sources.itemActivated.connect(self._open_source)
        col.addWidget(self.sources, 1)
        self._filling = False
        self._shown: list[DocCollection] = []

    def show_collections(self, collections: list[DocCollection], attached: set[str]) -> None:
        self._filling = True
        current = self.collections.currentItem().data(Qt.ItemDataRole.UserRole) if self.collections.currentItem() else None
        self.collections.clear()
        for c in collections:
            item = QListWidgetItem(c.summary)
            item.setData(Qt.ItemDataRole.UserRole, c.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if c.name in attached else Qt.CheckState.Unchecked)
            if c.failed:
                item.setToolTip("\n".join(f"{Path(p).name}: {r}" for p, r in c.failed))
            self.collections.addItem(item)
            if c.name == current:
                self.collections.setCurrentItem(item)
        self._filling = False
        self._shown = list(collections)
        self.empty.setVisible(not collections)
        self._update_actions()

    def _update_actions(self) -> None:
        """Pause and Cancel act on the selected collection (the first where none is): only while it is indexed."""
        name = self.selected_name()
        selected = next((c for c in self._shown if c.name == name), None)
        busy = selected is not None and selected.indexing
        self.pause_button.setEnabled(busy)
        self.cancel_button.setEnabled(busy)
        self.pause_button.setText("Resume" if busy and selected.paused else "Pause")

    def selected_name(self) -> str | None:
        item = self.collections.currentItem() or (self.collections.item(0) if self.collections.count() else None)
        return item.data(Qt.ItemDataRole.UserRole) if item else None

    def _selected_paused(self) -> bool:
        name = self.selected_name()
        return any(c.name == name and c.paused for c in self.ui.collections)

    def show_sources(self, sources: Sequence[DocSource], answer: str = "") -> None:
        cited = {int(n) for n in _CITE.findall(answer)}
        self.sources.clear()
        for s in sources:
            score = f"  ({s.score:.3f})" if s.score is not None else ""
            mark = "  ✓ cited" if s.number in cited else ""
            item = QListWidgetItem(f"{s.label}{score}{mark}")
            item.setToolTip(s.text[:500])
            item.setData(Qt.ItemDataRole.UserRole, s.uri)
            self.sources.addItem(item)

    def _item_changed(self, item: QListWidgetItem) -> None:
        if not self._filling:
            self.ui.set_attached(item.data(Qt.ItemDataRole.UserRole), item.checkState() == Qt.CheckState.Checked)

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of documents")
        if folder:
            self.ui.add_folder(Path(folder))

    def _open_source(self, item: QListWidgetItem) -> None:
        self.ui.open_url(QUrl(item.data(Qt.ItemDataRole.UserRole)))


class DocumentsPreparer:
    """A chat's attached collections answer its questions: the worker retrieves from them."""

    name = "documents"
    order = 10  # first: the passages change what the system prompt sits beside

    def prepare(self, request: AnswerRequest) -> None:
        names = sorted(request.chat.collections)
        if names:
            request.body.hearth = HearthRequest(collections=names)
            request.added.append(f"Documents: {', '.join(names)}")


class DocumentsFeature(QObject):
    """Puts documents into the chats: a header button, a side panel and a request preparer.

    Args:
        page: The chats page (its header, its side).
        controller: The chats' controller (its preparers, its conversations).
        api: The worker's API.
        open_url: Opens a source's file URI (tests pass their own).
    """

    def __init__(
        self,
        page: ChatsPage,
        controller: ChatController,
        api: HearthApi,
        open_url: Callable[[QUrl], object] = QDesktopServices.openUrl,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.page = page
        self.controller = controller
        self.api = api
        self.open_url = open_url
        self.collections: list[DocCollection] = []
        self.panel = DocsPanel(self)
        self.panel.hide()
        self.button = QToolButton()
        self.button.setObjectName("docsButton")
        self.button.setText("Docs")
        self.button.setToolTip("Answer from your documents: attach collections, see the sources")
        self.button.setCheckable(True)
        self.button.setIconSize(QSize(18, 18))
        self.button.toggled.connect(self._toggled)
        page.add_side_panel(self.panel, self.button)
        page.add_header_button(self.button)
        controller.add_preparer(DocumentsPreparer())
        controller.run_started.connect(self._run_started)
        controller.answer_finished.connect(self._answer_finished)
        page.chat_opened.connect(lambda _id: self._chat_changed())
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.refresh)
        self._chat_changed()  # the chat the page opened before documents joined it

    # -- collections ----------------------------------------------------------------------------
    def _toggled(self, on: bool) -> None:
        self.panel.setVisible(on)
        if on:
            self.refresh()
            self.timer.start()
        else:
            self.timer.stop()

    def refresh(self) -> None:
        call = self.api.collections()
        call.succeeded.connect(lambda answers: self._show([DocCollection.from_answer(c) for c in answers]))
        call.failed.connect(self._failed)

    def _show(self, collections: list[DocCollection]) -> None:
        self.collections = collections
        attached = self._current_attached()
        gone = attached - {c.name for c in collections}
        if gone:  # removed collections no longer answer this chat
            self._set_current_attached(attached - gone)
        self.panel.show_collections(collections, attached - gone)
        if not self.panel.status.text().startswith("Could not"):
            busy = [c for c in collections if c.indexing]
            self.panel.status.setText(f"Indexing {', '.join(c.name for c in busy)}…" if busy else "")

    def _failed(self, error: ApiError) -> None:
        self.panel.status.setText(error.message)

    def add_folder(self, folder: Path, name: str | None = None) -> None:
        name = name or re.sub(r"[^\w .\-]", "_", folder.name)[:64] or "documents"
        call = self.api.add_collection(name, [str(folder)])
        call.succeeded.connect(lambda _d: (self.set_attached(name, True), self.refresh()))
        call.failed.connect(self._failed)

    def control(self, action: str) -> None:
        name = self.panel.selected_name()
        if name:
            call = self.api.collection_action(name, action)
            call.succeeded.connect(lambda _d: self.refresh())
            call.failed.connect(self._failed)

    def _current_attached(self) -> set[str]:
        chat_id = self.page.chat_id
        chat = self.controller.chat(chat_id) if chat_id is not None else None
        return set(chat.collections) if chat is not None else set()

    def _set_current_attached(self, names: set[str]) -> None:
        chat_id = self.page.chat_id
        if chat_id is None:
            return
        try:
            self.controller.set_collections(chat_id, names)
        except KeyError:  # the chat was deleted meanwhile
            return
        self._show_count(len(names))

    def _show_count(self, n: int) -> None:
        self.button.setText(f"Docs ({n})" if n else "Docs")

    def set_attached(self, name: str, on: bool) -> None:
        """Attach ``name`` to the open chat (or detach it); the chat store keeps the choice."""
        names = self._current_attached()
        names.add(name) if on else names.discard(name)
        self._set_current_attached(names)

    def latest_sources(self, chat_id: int) -> tuple[Sequence[DocSource], str]:
        """The sources of the chat's latest answer that had some, and that answer's text (its citations)."""
        for message in reversed(self.controller.conversation(chat_id).messages()):
            if message.is_answer and message.sources:
                return message.sources, message.content
        return (), ""

    def _chat_changed(self) -> None:
        attached = self._current_attached()
        self._show_count(len(attached))
        self.panel.show_collections(self.collections, attached)
        chat_id = self.page.chat_id
        self.panel.show_sources(*(self.latest_sources(chat_id) if chat_id is not None else ((), "")))

    # -- answers --------------------------------------------------------------------------------
    def _run_started(self, run: AnswerRun) -> None:
        run.producer_started.connect(lambda producer, c=run.chat_id: producer.sources.connect(lambda s: self._sources(c, s)))

    def _sources(self, chat_id: int, sources: tuple) -> None:
        if chat_id == self.page.chat_id:
            self.panel.show_sources(sources)

    def _answer_finished(self, outcome: AnswerOutcome) -> None:
        sources = outcome.message.sources
        if sources and outcome.chat_id == self.page.chat_id:
            self.panel.show_sources(sources, outcome.message.content)


__all__ = ["DocCollection", "DocsPanel", "DocumentsFeature", "DocumentsPreparer"]
