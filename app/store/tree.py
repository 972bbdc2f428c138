"""A chat's messages as a tree: which path is active, the branches beside each message, where a switch leads.

Pure: built from ``(id, parent_id, active_seq)`` of one chat's rows, no database. A child always has a
larger id than its parent (it was written later; copies keep the order), which the walks rely on.

The active leaf is the message with the highest ``(active_seq, id)``: every message on the path shown is
stamped with a new ``active_seq`` when that path becomes active (a new message, a switch), so the path's
deepest message wins, and an old chat (every stamp 0) shows its newest message. Below any message, the
child with the highest stamp is the branch last shown there, which is where a switch to it leads (as in
ChatGPT and LM Studio), and a child never shown is the newest one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    parent_id: int | None
    active_seq: int = 0


class MessageTree:
    """The messages of one chat, by id, with their children in the order they were written.

    Raises:
        KeyError: from the methods taking a message id, for a message not in this chat.
    """

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes: dict[int, Node] = {n.id: n for n in nodes}
        self.children: dict[int | None, list[int]] = {}
        for node in sorted(self.nodes.values(), key=lambda n: n.id):
            # A parent that is gone (never, with the foreign key; a recovered copy may lack one) makes a root.
            parent = node.parent_id if node.parent_id in self.nodes else None
            self.children.setdefault(parent, []).append(node.id)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self.nodes

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def next_seq(self) -> int:
        """The stamp for the next path made active."""
        return max((n.active_seq for n in self.nodes.values()), default=0) + 1

    def leaf(self) -> int | None:
        """The active path's last message; None for a chat without messages."""
        if not self.nodes:
            return None
        return max(self.nodes.values(), key=lambda n: (n.active_seq, n.id)).id

    def parent(self, message_id: int) -> int | None:
        parent = self.nodes[message_id].parent_id
        return parent if parent in self.nodes else None

    def path_to(self, message_id: int) -> list[int]:
        """The messages from the first one down to ``message_id``, inclusive."""
        path: list[int] = []
        seen: set[int] = set()
        current: int | None = message_id
        self.nodes[message_id]  # noqa: B018 - a KeyError for a message not in the chat
        while current is not None and current not in seen:  # a damaged row could make a loop
            path.append(current)
            seen.add(current)
            current = self.parent(current)
        return path[::-1]

    def active_path(self) -> list[int]:
        leaf = self.leaf()
        return [] if leaf is None else self.path_to(leaf)

    def descend(self, message_id: int) -> int:
        """The leaf a switch to ``message_id`` shows: below each message, the child shown last there."""
        current = message_id
        self.nodes[message_id]  # noqa: B018 - a KeyError for a message not in the chat
        while kids := self.children.get(current):
            current = max(kids, key=lambda k: (self.nodes[k].active_seq, k))
        return current

    def siblings(self, message_id: int) -> list[int]:
        """``message_id`` and the other answers (or questions) to the same message, oldest first."""
        return list(self.children[self.parent(message_id)])

    def position(self, message_id: int) -> tuple[int, int]:
        """``(index, count)``: 1-based place of ``message_id`` among its siblings, and how many there are."""
        siblings = self.siblings(message_id)
        return siblings.index(message_id) + 1, len(siblings)

    def positions(self, ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        return {i: self.position(i) for i in ids}

    def subtree(self, message_id: int) -> list[int]:
        """``message_id`` and everything below it, parents before children."""
        out, todo = [], [message_id]
        while todo:
            current = todo.pop()
            out.append(current)
            todo.extend(self.children.get(current, ()))
        return sorted(out)


__all__ = ["MessageTree", "Node"]
