"""ChatStore: chats, messages and their stats in SQLite, through SQLAlchemy.

Every method is one short transaction; an answer that streams is written with
:meth:`ChatStore.update_message` every half second, so a crash keeps what was shown. When the disk
is full that write is held in memory, listeners of :meth:`ChatStore.on_disk_full` are told, and the
next write (or :meth:`ChatStore.flush`) that finds room saves it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine, create_engine, delete, event, or_, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from app.store import legacy_flags, migrate
from app.store.branching import CURRENT_LEAF, BranchingStore, Leaf, load_tree, stamp_path
from app.store.chat_documents import collections_json, sources_json
from app.store.images import ImageRef, ImageStore, images_from, images_json
from app.store.records import AnswerStats, AnswerSteps, ChatRecord, ChatSettings, DocSource, MessageRecord
from app.store.recovery import (
    UNSAVED_GLOB,
    Copied,
    StoreDamaged,
    StoreLocked,
    StoreTooNew,
    classify,
    copy_chats,
    is_disk_full,
    keep_damaged_copy,
    remove_database,
    stamp,
)
from app.store.row_mapping import (
    STATS_FIELDS,
    apply_settings,
    apply_stats,
    chat_record,
    message_record,
    stats_values,
)
from app.store.schema import ChatRow, MessageRow, utcnow
from app.store.tree import MessageTree, Node
from app.units import counted
from engine.paths import private_file

log = logging.getLogger(__name__)

DB_NAME = "chats.db"
TITLE_CHARS = 60


def title_from(text: str) -> str:
    """A chat's title from its first message: one line, cut at a word with "…" when long."""
    line = " ".join(text.split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0] or line[:TITLE_CHARS]
    return cut.rstrip(",.;:") + "…"


def open_engine(path: Path, *, busy_timeout: float = 5.0) -> Engine:
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": busy_timeout})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record) -> None:
        # WAL + NORMAL: a half-second save of a streaming answer costs well under a millisecond.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


def _open_checked(path: Path, busy_timeout: float) -> Engine:
    """An engine on ``path``, checked and migrated.

    Raises:
        StoreLocked: another program holds the database's lock.
        StoreDamaged: the file is not a database or fails SQLite's quick check.
    """
    private_file(path)
    engine = open_engine(path, busy_timeout=busy_timeout)
    try:
        with engine.connect() as connection:
            verdict = connection.exec_driver_sql("PRAGMA quick_check").scalar()
        if verdict != "ok":
            raise StoreDamaged(str(verdict))
        before = migrate.ensure_current(engine)
        # Only now that the rows hold them (the upgrade is committed): the tables moved out of mcp-servers.json.
        legacy_flags.drop_tables(path, legacy_flags.moved_tables(path, before, migrate.HEAD_REVISION))
    except DBAPIError as exc:
        engine.dispose()
        kind = classify(exc)
        if kind is None:
            raise
        raise kind(str(exc.orig)) from exc
    except (StoreDamaged, StoreTooNew):
        engine.dispose()
        raise
    return engine


class ChatStore(BranchingStore):
    """The chats of one data folder.

    A database that another program has locked, or that is damaged, does not stop the app:
    :attr:`problem` says in one sentence what happened (see :mod:`app.store.recovery`). One that a
    newer Hearth made is left untouched, and the store cannot open.

    Args:
        folder: Where the database lives (the Hearth data folder).
        busy_timeout: Seconds to wait for another program's lock before giving up on it.

    Raises:
        StoreTooNew: a newer Hearth made the database (the message says to update Hearth).
    """

    def __init__(self, folder: Path, *, busy_timeout: float = 5.0) -> None:
        self.path = folder / DB_NAME
        self.images = ImageStore(folder)  # the pictures attached to messages, by content hash
        self.problem: str | None = None
        self.kept_copy: Path | None = None  # the damaged file, moved aside
        try:
            self.engine = _open_checked(self.path, busy_timeout)
        except StoreLocked:
            self.engine = self._open_side_file(folder, busy_timeout)
        except StoreDamaged as exc:
            self.engine = self._replace_damaged(str(exc), busy_timeout)
        else:
            self._merge_unsaved(folder)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        self._unsaved: dict[int, dict] = {}  # message id -> values a full disk held back
        self._write_lock = threading.RLock()  # a listener may save again
        self._disk_full = False
        self._listeners: list[Callable[[bool], None]] = []

    def _open_side_file(self, folder: Path, busy_timeout: float) -> Engine:
        side = folder / f"chats-unsaved-{stamp()}.db"
        log.error("%s is locked by another program; this session's chats go to %s", self.path, side)
        self.problem = (
            f"The chat database {self.path} is locked by another program, so your earlier chats cannot be shown "
            f"now (they are safe in it); close that program and restart Hearth — chats you have now are kept in "
            f"{side.name} and join the others then."
        )
        return _open_checked(side, busy_timeout)

    def _replace_damaged(self, reason: str, busy_timeout: float) -> Engine:
        kept = keep_damaged_copy(self.path)
        self.kept_copy = kept
        engine = _open_checked(self.path, busy_timeout)
        try:
            copied = self._copy_from(engine, kept)
        except Exception:
            log.exception("nothing could be read from %s", kept)
            copied = Copied(0, 0, False)
        log.error("%s was damaged (%s); kept as %s, %d chats recovered", self.path, reason, kept, copied.chats)
        recovered = (
            f"all {counted(copied.chats, 'chat')} were recovered from it"
            if copied.complete
            else f"{counted(copied.chats, 'chat')} and {counted(copied.messages, 'message')} could be recovered from it, the rest may be lost"
        )
        self.problem = (
            f"The chat database was damaged, so Hearth started a new one and kept the damaged file as {kept}; "
            f"{recovered}."
        )
        return engine

    @staticmethod
    def _copy_from(engine: Engine, source: Path) -> Copied:
        raw = engine.raw_connection()
        try:
            return copy_chats(source, raw.driver_connection)
        finally:
            raw.close()

    def _merge_unsaved(self, folder: Path) -> None:
        """Chats a session kept aside while the database was locked join it now."""
        for side in sorted(folder.glob(UNSAVED_GLOB)):
            try:
                copied = self._copy_from(self.engine, side)
            except Exception:
                log.exception("could not bring back the chats kept in %s", side)
                self.problem = f"The chats kept in {side} while the database was locked could not be read; the file is kept."
                continue
            log.info("merged %d chats kept in %s while the database was locked", copied.chats, side)
            remove_database(side)

    def session(self) -> Session:
        return self._session()

    # -- chats --------------------------------------------------------------------------------
    def list_chats(self, query: str = "") -> list[ChatRecord]:
        """Chats, newest activity first; ``query`` matches titles and message text."""
        stmt = select(ChatRow).where(ChatRow.split_of.is_(None)).order_by(ChatRow.updated_at.desc(), ChatRow.id.desc())
        if query.strip():
            pattern = f"%{query.strip()}%"
            in_messages = select(MessageRow.chat_id).where(MessageRow.content.ilike(pattern))
            stmt = stmt.where(or_(ChatRow.title.ilike(pattern), ChatRow.id.in_(in_messages)))
        with self.session() as s:
            return [chat_record(r) for r in s.scalars(stmt)]

    def get_chat(self, chat_id: int) -> ChatRecord | None:
        with self.session() as s:
            row = s.get(ChatRow, chat_id)
            return chat_record(row) if row else None

    def create_chat(self, settings: ChatSettings | None = None, title: str = "New chat") -> ChatRecord:
        row = ChatRow(title=title)
        apply_settings(row, settings or ChatSettings())
        with self.session() as s, s.begin():
            s.add(row)
        return chat_record(row)

    def rename_chat(self, chat_id: int, title: str) -> ChatRecord:
        return self._update_chat(chat_id, title=title.strip()[:200] or "Untitled")

    def update_settings(self, chat_id: int, settings: ChatSettings) -> ChatRecord:
        return self._update_chat(chat_id, settings=settings)

    def _update_chat(self, chat_id: int, *, title: str | None = None, settings: ChatSettings | None = None) -> ChatRecord:
        with self.session() as s, s.begin():
            row = s.get(ChatRow, chat_id)
            if row is None:
                raise KeyError(chat_id)
            if title is not None:
                row.title = title
            if settings is not None:
                apply_settings(row, settings)
        return chat_record(row)

    def set_collections(self, chat_id: int, names: Iterable[str]) -> ChatRecord:
        """Attach exactly ``names`` (document collections) to the chat; kept across restarts.

        Raises:
            KeyError: no such chat.
        """
        with self.session() as s, s.begin():
            row = s.get(ChatRow, chat_id)
            if row is None:
                raise KeyError(chat_id)
            row.doc_collections = collections_json(names)
        return chat_record(row)

    def delete_chat(self, chat_id: int) -> None:
        """Delete the chat with every branch, and its side-by-side column."""
        with self.session() as s, s.begin():
            ids = [chat_id, *s.scalars(select(ChatRow.id).where(ChatRow.split_of == chat_id))]
            s.execute(delete(MessageRow).where(MessageRow.chat_id.in_(ids)))
            s.execute(delete(ChatRow).where(ChatRow.id.in_(ids)))
        self.collect_images()

    def collect_images(self) -> int:
        """Remove the pictures no message refers to any more; how many went."""
        with self.session() as s:
            kept = {ref.sha256 for text in s.scalars(select(MessageRow.images).where(MessageRow.images.is_not(None)))
                    for ref in images_from(text)}  # fmt: skip
        return self.images.collect(kept)

    # -- side by side -------------------------------------------------------------------------------
    def split_companion(self, chat_id: int) -> ChatRecord | None:
        """The chat's second column, when it is split side by side."""
        with self.session() as s:
            row = s.scalars(select(ChatRow).where(ChatRow.split_of == chat_id).order_by(ChatRow.id.desc())).first()
            return chat_record(row) if row is not None else None

    def start_split(self, chat_id: int, model: str) -> ChatRecord:
        """Split the chat side by side with ``model``: its column holds a copy of the conversation shown,
        and the chat's settings with that model. The copied messages are stamped 0 on the active path, so
        every message the column is sent later (stamped 1 and up) tells that it was used.

        Raises:
            KeyError: no such chat.
        """
        chat = self.get_chat(chat_id)
        if chat is None:
            raise KeyError(chat_id)
        path = self.messages(chat_id)
        companion = self.fork_chat(chat_id, path[-1].id) if path else self.create_chat(chat.settings)
        with self.session() as s, s.begin():
            row = s.get(ChatRow, companion.id)
            row.split_of, row.model, row.title = chat_id, model, f"{chat.title} — {model}"[:200]
            s.execute(update(MessageRow).where(MessageRow.chat_id == companion.id).values(active_seq=0))
        return self.get_chat(companion.id)

    def end_split(self, chat_id: int) -> ChatRecord | None:
        """Close the chat's second column. A column that was sent no message is deleted (None is returned);
        one that was stays as a chat of its own in the list, titled with its model first (the titles of the
        two differ where the list cuts them short) and listed just below the chat."""
        companion = self.split_companion(chat_id)
        if companion is None:
            return None
        with self.session() as s, s.begin():
            used = s.scalars(
                select(MessageRow.id).where(MessageRow.chat_id == companion.id, MessageRow.active_seq > 0).limit(1)
            ).first()
            if used is not None:
                row, chat = s.get(ChatRow, companion.id), s.get(ChatRow, chat_id)
                row.split_of = None
                row.title = f"{row.model}: {chat.title}"[:200]
                if row.updated_at >= chat.updated_at:  # the chat, not its column, opens first at the next launch
                    row.updated_at = chat.updated_at - timedelta(microseconds=1)
        if used is None:
            self.delete_chat(companion.id)
            return None
        return self.get_chat(companion.id)

    # -- messages -----------------------------------------------------------------------------
    def messages(self, chat_id: int) -> list[MessageRecord]:
        """The chat's active path, first message to last (other branches: :meth:`all_messages`)."""
        with self.session() as s:
            rows = {r.id: r for r in s.scalars(select(MessageRow).where(MessageRow.chat_id == chat_id))}
            tree = MessageTree(Node(r.id, r.parent_id, r.active_seq or 0) for r in rows.values())
            return [self._unsaved_record(message_record(rows[i])) for i in tree.active_path()]

    def add_message(
        self,
        chat_id: int,
        role: str,
        content: str,
        stats: AnswerStats | None = None,
        *,
        parent_id: int | None | Leaf = CURRENT_LEAF,
        sources: Sequence[DocSource] = (),
        images: Sequence[ImageRef] = (),
    ) -> MessageRecord:
        """Add a message (an answer with the document ``sources`` it was given) below ``parent_id``: by
        default the chat's current leaf, so it continues the path shown; None starts a new first message.
        It becomes the active leaf. The first user message also names a chat still called "New chat".

        Raises:
            KeyError: no such chat, or ``parent_id`` is not one of its messages.
        """
        row = MessageRow(
            chat_id=chat_id, role=role, content=content, doc_sources=sources_json(sources), images=images_json(images)
        )
        if stats is not None:
            apply_stats(row, stats)
        with self.session() as s, s.begin():
            chat = s.get(ChatRow, chat_id)
            if chat is None:
                raise KeyError(chat_id)
            tree = load_tree(s, chat_id)
            leaf = tree.leaf()
            parent = leaf if parent_id is CURRENT_LEAF else parent_id
            if parent is not None and parent not in tree:
                raise KeyError(parent)
            row.parent_id, row.active_seq = parent, tree.next_seq
            if parent is not None and parent != leaf:  # a new branch: the path above it is the one shown now
                stamp_path(s, tree.path_to(parent), row.active_seq)
            s.add(row)
            chat.updated_at = utcnow()
            if role == "user" and chat.title == "New chat" and content.strip():
                chat.title = title_from(content)
        return message_record(row)

    def update_message(
        self,
        message_id: int,
        content: str,
        stats: AnswerStats | None = None,
        *,
        steps: AnswerSteps | None = None,
        sources: Sequence[DocSource] | None = None,
    ) -> None:
        """Rewrite a message (a streaming answer, twice a second): one UPDATE, no ORM load; ``steps``
        (its thinking and tool calls so far) with it when given. A message deleted meanwhile (its chat
        was deleted while answering) is left alone. When the disk is full the new text is kept in
        memory (and shown by :meth:`messages`) until a later write or :meth:`flush` finds room. ``sources``:
        the document passages the worker gave the answer (they arrive with its first chunk)."""
        values = {"content": content, **(stats_values(stats) if stats is not None else {})}
        if steps is not None:
            values["steps"] = steps.to_json()
        if sources is not None:
            values["doc_sources"] = sources_json(sources)
        self._write(message_id, values)

    def save_steps(self, message_id: int, steps: AnswerSteps) -> bool:
        """Keep an answer's thinking and tool calls (rewritten as each step finishes); False when
        the message is gone."""
        return self._write(message_id, {"steps": steps.to_json()})

    # -- writes a full disk holds back ----------------------------------------------------------
    @property
    def disk_full(self) -> bool:
        """Whether the last write of an answer failed for want of disk space (its text is in memory)."""
        return self._disk_full

    def on_disk_full(self, listener: Callable[[bool], None]) -> Callable[[], None]:
        """Call ``listener(True)`` when an answer cannot be saved because the disk is full, and
        ``listener(False)`` once everything held back is saved; returns a function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def flush(self) -> bool:
        """Write what a full disk held back; True when nothing is left unsaved."""
        with self._write_lock:
            if not self._unsaved:
                return True
            return self._flush_locked() is not None

    def _write(self, message_id: int, values: dict) -> bool:
        with self._write_lock:
            self._unsaved[message_id] = {**self._unsaved.get(message_id, {}), **values}
            found = self._flush_locked()
            return found is None or message_id in found

    def _flush_locked(self) -> set[int] | None:
        """Write every held-back message; the ids of those that exist, or None when the disk is full."""
        found: set[int] = set()
        try:
            with self.engine.begin() as connection:
                for mid, values in self._unsaved.items():
                    if connection.execute(update(MessageRow).where(MessageRow.id == mid).values(**values)).rowcount:
                        found.add(mid)
        except DBAPIError as exc:
            if not is_disk_full(exc):
                raise
            if not self._disk_full:
                log.error("the disk is full: %d answers are kept in memory until it has room (%s)", len(self._unsaved), exc.orig)
                self._set_disk_full(True)
            return None
        self._unsaved.clear()
        if self._disk_full:
            log.info("the disk has room again: every answer held in memory is saved")
            self._set_disk_full(False)
        return found

    def _set_disk_full(self, full: bool) -> None:
        self._disk_full = full
        for listener in list(self._listeners):
            listener(full)

    def _unsaved_record(self, record: MessageRecord) -> MessageRecord:
        """``record`` with what a full disk held back of it."""
        held = self._unsaved.get(record.id)
        if not held:
            return record
        stats = record.stats
        if stats is not None:
            stats = replace(stats, **{k: v for k, v in held.items() if k in STATS_FIELDS})
        return replace(record, content=held.get("content", record.content), stats=stats)

    def steps(self, message_id: int) -> AnswerSteps | None:
        """An answer's thinking and tool calls; None when it had none."""
        held = self._unsaved.get(message_id, {})
        if "steps" in held:
            return _steps(message_id, held["steps"])
        with self.engine.connect() as connection:
            text = connection.execute(select(MessageRow.steps).where(MessageRow.id == message_id)).scalar()
        return _steps(message_id, text)

    def chat_steps(self, chat_id: int) -> dict[int, AnswerSteps]:
        """The steps of every answer of a chat that has some, by message id."""
        stmt = select(MessageRow.id, MessageRow.steps).where(MessageRow.chat_id == chat_id, MessageRow.steps.is_not(None))
        with self.engine.connect() as connection:
            rows = connection.execute(stmt).all()
        found = {mid: _steps(mid, text) for mid, text in rows}
        found.update({mid: _steps(mid, held["steps"]) for mid, held in list(self._unsaved.items()) if "steps" in held and mid in found})
        return {mid: s for mid, s in found.items() if s is not None}

    def reasoning_texts(self, chat_id: int) -> dict[int, str]:
        """The thinking text of a chat's answers, by message id (sent back with them; the engine keeps
        it only where the model's template asks for it). Not the chat's thinking switch: that is
        ``ChatSettings.thinking``."""
        return {mid: s.reasoning for mid, s in self.chat_steps(chat_id).items() if s.reasoning}

    def delete_messages_after(self, chat_id: int, message_id: int, *, inclusive: bool = False) -> None:
        """Delete every message below ``message_id`` in the chat, on every branch (and it, if
        ``inclusive``); the path above it is shown. Regenerating and editing keep the old branch instead
        (:meth:`add_sibling`)."""
        with self.session() as s, s.begin():
            tree = load_tree(s, chat_id)
            if message_id not in tree:
                return
            doomed = tree.subtree(message_id)[0 if inclusive else 1 :]
            for start in range(0, len(doomed), 500):
                s.execute(delete(MessageRow).where(MessageRow.id.in_(doomed[start : start + 500])))

    def close(self) -> None:
        if self._unsaved and not self.flush():
            log.error("the disk is still full: %d answers could not be saved", len(self._unsaved))
        self.engine.dispose()


def _steps(message_id: int, text: str | None) -> AnswerSteps | None:
    if not text:
        return None
    try:
        return AnswerSteps.from_json(text)
    except (ValueError, TypeError):  # a damaged row: the answer shows without its steps
        log.warning("message %d: its steps cannot be read", message_id)
        return None


def interrupted(message: MessageRecord) -> MessageRecord:
    """An answer saved mid-stream by a run that died: marked so the view says so."""
    if message.stats is None or message.stats.finish_reason is not None:
        return message
    return replace(message, stats=replace(message.stats, finish_reason="error", error="The answer was interrupted."))
