"""ChatController: the chats' lifecycle (create, fork, split, rename, delete) and their answers (send, stop,
regenerate, edit), for any number of chats at once.

It owns one :class:`ConversationModel` per opened chat and one :class:`AnswerRun` per chat
that is answering; the worker batches the runs of several chats together. Features that change
what an answer asks for (documents, the thinking switch, tools, attachments) are request
preparers added with :meth:`add_preparer`; they run before each answer, in the order each declares. Pages and
features change chats through the controller, never through the store.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.chat.answer_run import AnswerOutcome, AnswerRun
from app.chat.context import DEFAULT_CONTEXT
from app.chat.conversation_model import ConversationModel
from app.chat.preparers import RequestPreparer, ThinkingPreparer
from app.net.api import HearthApi
from app.net.types import ModelInfo, StatsSnapshot
from app.store.chat_store import ChatStore, interrupted
from app.store.images import ImageRef
from app.store.records import AnswerStats, AnswerSteps, ChatRecord, ChatSettings, MessageRecord

log = logging.getLogger(__name__)

class ChatController(QObject):
    """The chats' behaviour, apart from any widget (the chat page drives it)."""

    answer_started = Signal(int)  # chat id
    answer_finished = Signal(AnswerOutcome)
    chats_changed = Signal()  # chats added, removed, renamed or reordered: the sidebar refreshes
    run_started = Signal(AnswerRun)  # views follow its steps
    chat_copied = Signal(int, int)  # a chat, its copy (a fork, a split's second column): features copy what they keep per chat
    chat_deleted = Signal(int)  # chat id: it and its split's second column are gone

    def __init__(self, store: ChatStore, api: HearthApi, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.api = api
        self._conversations: dict[int, ConversationModel] = {}
        self._runs: dict[int, AnswerRun] = {}
        self._context: dict[str, int] = {}  # model name -> tokens per sequence
        self._preparers: list[RequestPreparer] = []
        self.add_preparer(ThinkingPreparer())

    def add_preparer(self, preparer: RequestPreparer) -> None:
        """Run ``preparer`` before every answer, in the order the preparers declare (ties: the first added first)."""
        self._preparers.append(preparer)
        self._preparers.sort(key=lambda p: p.order)

    def remove_preparer(self, preparer: RequestPreparer) -> None:
        """Stop running ``preparer`` (a feature turned off); answers already started keep theirs."""
        if preparer in self._preparers:
            self._preparers.remove(preparer)

    @property
    def preparers(self) -> tuple[RequestPreparer, ...]:
        return tuple(self._preparers)

    # -- chats ------------------------------------------------------------------------------
    def chat(self, chat_id: int) -> ChatRecord | None:
        return self.store.get_chat(chat_id)

    def chats(self, query: str = "") -> list[ChatRecord]:
        """The chats of the list, newest activity first; ``query`` matches titles and message text."""
        return self.store.list_chats(query)

    def picture_path(self, ref: ImageRef) -> Path:
        """Where an attached picture's file is kept (views show it from there)."""
        return self.store.images.path(ref)

    def create_chat(self, settings: ChatSettings) -> ChatRecord:
        chat = self.store.create_chat(settings)
        self.chats_changed.emit()
        return chat

    def fork(self, chat_id: int, message_id: int) -> ChatRecord | None:
        """A new chat holding this one up to ``message_id`` (the branch shown), to go on from there."""
        try:
            fork = self.store.fork_chat(chat_id, message_id)
        except KeyError:
            return None
        self.chat_copied.emit(chat_id, fork.id)
        self.chats_changed.emit()
        return fork

    def rename(self, chat_id: int, title: str) -> ChatRecord:
        """Raises KeyError: no such chat."""
        chat = self.store.rename_chat(chat_id, title)
        self.chats_changed.emit()
        return chat

    def update_settings(self, chat_id: int, settings: ChatSettings) -> ChatRecord:
        return self.store.update_settings(chat_id, settings)

    def set_collections(self, chat_id: int, names: Iterable[str]) -> ChatRecord:
        """Attach exactly ``names`` (document collections) to the chat. Raises KeyError: no such chat."""
        return self.store.set_collections(chat_id, names)

    def delete(self, chat_id: int) -> None:
        """Delete the chat, its split's second column and every answer running in them."""
        companion = self.store.split_companion(chat_id)
        for gone in ((companion.id,) if companion is not None else ()) + (chat_id,):
            self.forget(gone)
        self.store.delete_chat(chat_id)
        self.chat_deleted.emit(chat_id)
        self.chats_changed.emit()

    def forget(self, chat_id: int) -> None:
        """Stop the chat's answer and drop its conversation model (read from the store again when opened)."""
        self.stop(chat_id)
        self._conversations.pop(chat_id, None)

    def export_text(self, chat_id: int, fmt: str) -> str:
        """The chat as Markdown (``md``) or JSON, every branch with its answers' thinking and tool calls."""
        from app.agent.export import export_text

        chat = self.store.get_chat(chat_id)
        return export_text(chat, self.conversation(chat_id).messages(), fmt, self.steps,
                           tree=self.store.all_messages(chat_id), image_data=self.store.images.data_url)  # fmt: skip

    # -- side by side -----------------------------------------------------------------------
    def split_companion(self, chat_id: int) -> ChatRecord | None:
        """The chat's second column, while it is split side by side."""
        return self.store.split_companion(chat_id)

    def start_split(self, chat_id: int, model: str) -> ChatRecord:
        """Split the chat side by side with ``model``: its second column is a copy of the chat.

        Raises:
            KeyError: no such chat.
        """
        companion = self.store.start_split(chat_id, model)
        self.chat_copied.emit(chat_id, companion.id)
        return companion

    def end_split(self, chat_id: int) -> ChatRecord | None:
        """Close the chat's second column (its answer stops). A column that was sent a message stays, as a
        chat of the list named after its model, and is returned; one that was not is deleted."""
        companion = self.store.split_companion(chat_id)
        if companion is None:
            return None
        self.stop(companion.id)
        kept = self.store.end_split(chat_id)
        if kept is None:
            self._conversations.pop(companion.id, None)
            self.chat_deleted.emit(companion.id)
        self.chats_changed.emit()
        return kept

    def match_split(self, chat_id: int) -> None:
        """The chat's second column takes the chat's settings again, with its own model (before each message)."""
        chat, companion = self.store.get_chat(chat_id), self.store.split_companion(chat_id)
        if chat is not None and companion is not None:
            self.store.update_settings(companion.id, replace(chat.settings, model=companion.settings.model))

    # -- what the views need ------------------------------------------------------------------
    def conversation(self, chat_id: int) -> ConversationModel:
        """The chat's message model (loaded once; answers cut off by a crash are marked)."""
        model = self._conversations.get(chat_id)
        if model is None:
            messages = []
            for m in self.store.messages(chat_id):
                fixed = interrupted(m)
                if fixed is not m:
                    self.store.update_message(fixed.id, fixed.content, fixed.stats)
                messages.append(fixed)
            model = ConversationModel(chat_id, messages, self, branches=self.store.branch_counts(chat_id))
            self._conversations[chat_id] = model
        return model

    def steps(self, message_id: int) -> AnswerSteps | None:
        """An answer's steps: a running answer's as they grow, else those kept in the chat store."""
        for run in self._runs.values():
            if run.answer.id == message_id:
                return run.kept_steps()
        return self.store.steps(message_id)

    def is_answering(self, chat_id: int) -> bool:
        return chat_id in self._runs

    def answering_chats(self) -> list[int]:
        return list(self._runs)

    def context_length(self, model: str) -> int:
        return self._context.get(model, DEFAULT_CONTEXT)

    def learn_models(self, models: list[ModelInfo]) -> None:
        """Context lengths from /api/models (the model's own limit, until loaded)."""
        for m in models:
            if m.context_length and m.name not in self._context:
                self._context[m.name] = min(m.context_length, 4096)

    def learn_stats(self, stats: StatsSnapshot) -> None:
        """Context lengths of loaded models from /api/stats (what the worker really allows)."""
        for m in stats.models:
            if m.n_ctx:
                self._context[m.name] = m.n_ctx

    # -- actions ------------------------------------------------------------------------------
    def send(self, chat_id: int, text: str, *, images: Sequence[ImageRef] = ()) -> bool:
        """Add a user message (with the pictures attached) and start answering it. False when the chat is
        busy or ``text`` empty."""
        if not text.strip() or self.is_answering(chat_id):
            return False
        message = self.store.add_message(chat_id, "user", text, images=images)
        self.conversation(chat_id).append(message)
        self.chats_changed.emit()
        self._answer(chat_id)
        return True

    def stop(self, chat_id: int) -> None:
        run = self._runs.get(chat_id)
        if run is not None:
            run.stop()

    def stop_all(self) -> None:
        """Stop every answer (at quit); each keeps its text."""
        for run in list(self._runs.values()):
            run.stop()

    def regenerate(self, chat_id: int) -> bool:
        """Answer the last question again; the earlier answer stays as a branch beside the new one."""
        model = self.conversation(chat_id)
        last = model.last_answer()
        chat = self.store.get_chat(chat_id)
        if last is None or chat is None or self.is_answering(chat_id):
            return False
        answer = self.store.add_sibling(last.id, "", AnswerStats(model=chat.settings.model))
        model.remove_from(model.row_of(last.id))
        self._answer(chat_id, answer=answer)
        return True

    def continue_answer(self, chat_id: int) -> bool:
        """Let the last answer, cut off at its token limit, go on: the model continues the same message (the
        worker's ``continue_final_message``), and what it writes is added to it. False when there is none."""
        model = self.conversation(chat_id)
        last = model.last_answer()
        if last is None or self.is_answering(chat_id) or last.stats is None or last.stats.finish_reason != "length":
            return False
        self._answer(chat_id, answer=last, continuing=True)
        return True

    def edit_and_resend(self, chat_id: int, message_id: int, text: str) -> bool:
        """Ask an edited question as a new branch beside the original (which keeps its answers)."""
        model = self.conversation(chat_id)
        row = model.row_of(message_id)
        if row < 0 or not text.strip() or self.is_answering(chat_id) or model.message(row).role != "user":
            return False
        edited = self.store.add_sibling(message_id, text, images=model.message(row).images)  # its pictures stay
        model.remove_from(row)
        model.append(edited)
        self._answer(chat_id)
        return True

    def switch_branch(self, chat_id: int, message_id: int, step: int) -> bool:
        """Show the version ``step`` places from ``message_id`` (-1: the one before) and the branch below it."""
        if self.is_answering(chat_id):
            return False
        versions = self.store.siblings(message_id)
        index = versions.index(message_id) + step
        if not 0 <= index < len(versions):
            return False
        path = self.store.switch_branch(versions[index])
        self.conversation(chat_id).reset([interrupted(m) for m in path], self.store.branch_counts(chat_id))
        return True


    # -- running answers ----------------------------------------------------------------------
    def _answer(self, chat_id: int, *, answer: MessageRecord | None = None, continuing: bool = False) -> None:
        """Answer the conversation's last question in ``answer`` (a new version's row), or in a new message; or,
        ``continuing``, go on with ``answer``, the conversation's last message."""
        chat = self.store.get_chat(chat_id)
        if chat is None:
            return
        model = self.conversation(chat_id)
        history = model.messages()
        if answer is None:
            answer = self.store.add_message(chat_id, "assistant", "", AnswerStats(model=chat.settings.model))
        if continuing:
            model.replace(answer, streaming=True)
        else:
            model.append(answer, streaming=True)
            model.set_branches(self.store.branch_counts(chat_id))
        run = AnswerRun(
            api=self.api,
            store=self.store,
            conversation=model,
            chat=chat,
            answer=answer,
            history=history,
            context_length=self.context_length(chat.settings.model),
            preparers=self._preparers,
            continuing=continuing,
            parent=self,
        )
        run.finished.connect(self._on_run_finished)
        self._runs[chat_id] = run
        self.run_started.emit(run)
        run.start()
        self.answer_started.emit(chat_id)

    def _on_run_finished(self, outcome: AnswerOutcome) -> None:
        run = self._runs.pop(outcome.chat_id, None)
        if run is not None:
            run.deleteLater()
        self.answer_finished.emit(outcome)
        # The model may have loaded on this request: learn its real context length.
        call = self.api.stats()
        call.succeeded.connect(self.learn_stats)
