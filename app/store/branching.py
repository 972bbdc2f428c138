"""Branches of a chat in the store: siblings of a message, switching the path shown, forking a chat.

A regenerated answer is a new assistant message beside the old one (same parent); an edited question is a
new user message beside the old one. Nothing is deleted: the new message becomes the active branch, and
:meth:`BranchingStore.switch_branch` shows any other. How the active path is kept: :mod:`app.store.tree`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from app.store.images import ImageRef
from app.store.records import AnswerStats, ChatRecord, DocSource, MessageRecord
from app.store.row_mapping import SETTINGS_COLUMNS, chat_record, message_record
from app.store.schema import ChatRow, MessageRow, utcnow
from app.store.tree import MessageTree, Node


class Leaf(Enum):
    """Where :meth:`ChatStore.add_message` puts a message by default: below the chat's current leaf."""

    CURRENT = "current"


CURRENT_LEAF = Leaf.CURRENT
_STAMP_BATCH = 500  # ids per UPDATE: below SQLite's oldest limit on bound parameters (999)
_NOT_COPIED = frozenset({"id", "chat_id", "parent_id", "active_seq"})


def load_tree(s: Session, chat_id: int) -> MessageTree:
    """One indexed query: the shape of the chat's messages, without their text."""
    rows = s.execute(
        select(MessageRow.id, MessageRow.parent_id, MessageRow.active_seq).where(MessageRow.chat_id == chat_id)
    )
    return MessageTree(Node(i, p, a or 0) for i, p, a in rows)


def stamp_path(s: Session, ids: Sequence[int], seq: int) -> None:
    """Mark ``ids`` (a path) as shown now."""
    for start in range(0, len(ids), _STAMP_BATCH):
        chunk = list(ids[start : start + _STAMP_BATCH])
        s.execute(update(MessageRow).where(MessageRow.id.in_(chunk)).values(active_seq=seq))


def _owner(s: Session, message_id: int) -> MessageRow:
    row = s.get(MessageRow, message_id)
    if row is None:
        raise KeyError(message_id)
    return row


class BranchingStore:
    """The branch methods of :class:`app.store.chat_store.ChatStore` (which supplies the three below)."""

    session: Callable[[], Session]
    messages: Callable[[int], list[MessageRecord]]
    add_message: Callable[..., MessageRecord]

    def add_sibling(
        self,
        message_id: int,
        content: str,
        stats: AnswerStats | None = None,
        *,
        role: str | None = None,
        sources: Sequence[DocSource] = (),
        images: Sequence[ImageRef] = (),
    ) -> MessageRecord:
        """A new message beside ``message_id`` (same parent, its role unless ``role``): a regenerated
        answer, or an edited question with its new text. It becomes the active leaf; the old one stays.

        Raises:
            KeyError: no such message.
        """
        with self.session() as s:
            row = _owner(s, message_id)
            chat_id, parent_id, old_role = row.chat_id, row.parent_id, row.role
        return self.add_message(chat_id, role or old_role, content, stats, parent_id=parent_id, sources=sources, images=images)

    def siblings(self, message_id: int) -> list[int]:
        """``message_id`` and the messages beside it (same parent), oldest first.

        Raises:
            KeyError: no such message.
        """
        with self.session() as s:
            return load_tree(s, _owner(s, message_id).chat_id).siblings(message_id)

    def branch_info(self, message_id: int) -> tuple[int, int]:
        """``(index, count)``: "2 of 3" for the second of three answers to the same question.

        Raises:
            KeyError: no such message.
        """
        with self.session() as s:
            return load_tree(s, _owner(s, message_id).chat_id).position(message_id)

    def branch_counts(self, chat_id: int) -> dict[int, tuple[int, int]]:
        """``branch_info`` of every message on the chat's active path, in one query."""
        with self.session() as s:
            tree = load_tree(s, chat_id)
        return tree.positions(tree.active_path())

    def all_messages(self, chat_id: int) -> list[MessageRecord]:
        """Every message of every branch of the chat, oldest first (each with its ``parent_id``)."""
        with self.session() as s:
            rows = s.scalars(select(MessageRow).where(MessageRow.chat_id == chat_id).order_by(MessageRow.id))
            return [message_record(r) for r in rows]

    def switch_branch(self, message_id: int) -> list[MessageRecord]:
        """Show the branch through ``message_id``: below it, at each message, the branch last shown there
        (the newest one where none was). Returns the chat's new active path.

        Raises:
            KeyError: no such message.
        """
        with self.session() as s, s.begin():
            chat_id = _owner(s, message_id).chat_id
            tree = load_tree(s, chat_id)
            stamp_path(s, tree.path_to(tree.descend(message_id)), tree.next_seq)
        return self.messages(chat_id)

    def fork_chat(self, chat_id: int, message_id: int) -> ChatRecord:
        """A new chat with this one's settings and collections, titled "<title> (fork)", holding a copy of
        the path down to ``message_id`` (its stats, steps and sources too).

        Raises:
            KeyError: no such chat, or ``message_id`` is not one of its messages.
        """
        table = MessageRow.__table__
        with self.session() as s, s.begin():
            source = s.get(ChatRow, chat_id)
            if source is None:
                raise KeyError(chat_id)
            path = load_tree(s, chat_id).path_to(message_id)
            wanted = set(path)
            rows = {r.id: r for r in s.execute(select(table).where(table.c.chat_id == chat_id)) if r.id in wanted}
            fork = ChatRow(
                title=f"{source.title} (fork)"[:200],
                doc_collections=source.doc_collections,
                **{c: getattr(source, c) for c in SETTINGS_COLUMNS},
            )
            s.add(fork)
            s.flush()
            parent: int | None = None
            for old_id in path:
                values = {k: v for k, v in rows[old_id]._mapping.items() if k not in _NOT_COPIED}
                new = s.execute(insert(table).values(chat_id=fork.id, parent_id=parent, active_seq=1, **values))
                parent = new.inserted_primary_key[0]
            fork.updated_at = utcnow()
        return chat_record(fork)

__all__ = ["CURRENT_LEAF", "BranchingStore", "Leaf", "load_tree", "stamp_path"]
