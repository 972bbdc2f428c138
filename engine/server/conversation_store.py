"""The bounded in-memory store behind OpenAI's Conversations API (``/v1/conversations``): each conversation's
items, which a response given ``conversation`` reads before its input and then adds its input and output to."""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

#: Conversations kept at once; past it the least recently used goes.
MAX_CONVERSATIONS = 1_000
#: Characters of all conversations' items together (as JSON), the least recently used going first past it.
MAX_CHARS = 64_000_000


def item_chars(item: dict) -> int:
    return len(str(item))


class ConversationFull(ValueError):
    """Items that would take one conversation past the store's whole bound."""


@dataclass(slots=True)
class Conversation:
    """One conversation: its items in order, oldest first, each with its ``id``."""

    id: str
    created_at: int
    metadata: dict[str, str]
    items: list[dict] = field(default_factory=list)
    chars: int = 0

    def resource(self) -> dict:
        """The conversation as OpenAI's API gives it (its items are listed apart)."""
        return {"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": dict(self.metadata)}


class ConversationStore:
    """Conversations by id: at most ``max_conversations`` and ``max_chars`` of items together, the least recently
    used going first. Thread-safe; what it hands out are copies."""

    def __init__(self, max_conversations: int = MAX_CONVERSATIONS, max_chars: int = MAX_CHARS) -> None:
        self.max_conversations = max_conversations
        self.max_chars = max_chars
        self._items: OrderedDict[str, Conversation] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def create(self, items: list[dict], metadata: dict[str, str]) -> dict:
        conv = Conversation(f"conv_{uuid.uuid4().hex}", int(time.time()), dict(metadata))
        with self._lock:
            self._append(conv, items)  # (empty, so it goes nowhere when the items are too many)
            self._items[conv.id] = conv
            self._evict()
        return conv.resource()

    def get(self, cid: str) -> dict | None:
        with self._lock:
            conv = self._used(cid)
            return conv.resource() if conv is not None else None

    def items(self, cid: str) -> list[dict] | None:
        """The conversation's items, oldest first (None: no such conversation)."""
        with self._lock:
            conv = self._used(cid)
            return list(conv.items) if conv is not None else None

    def update(self, cid: str, metadata: dict[str, str]) -> dict | None:
        with self._lock:
            conv = self._used(cid)
            if conv is None:
                return None
            conv.metadata = dict(metadata)
            return conv.resource()

    def delete(self, cid: str) -> bool:
        with self._lock:
            conv = self._items.pop(cid, None)
            if conv is not None:
                self._chars -= conv.chars
            return conv is not None

    def add(self, cid: str, items: list[dict]) -> bool:
        """Append ``items`` (each with its id) to the conversation; False when it is gone.

        Raises:
            ConversationFull: the items would take the conversation past the store's whole bound.
        """
        with self._lock:
            conv = self._used(cid)
            if conv is None:
                return False
            self._append(conv, items)
            return True

    def delete_item(self, cid: str, iid: str) -> dict | None:
        """Remove the item ``iid``; the conversation (None: no such conversation). Raises KeyError: no such item."""
        with self._lock:
            conv = self._used(cid)
            if conv is None:
                return None
            for i, item in enumerate(conv.items):
                if item.get("id") == iid:
                    gone = item_chars(conv.items.pop(i))
                    conv.chars -= gone
                    self._chars -= gone
                    return conv.resource()
            raise KeyError(iid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def _used(self, cid: str) -> Conversation | None:
        conv = self._items.get(cid)
        if conv is not None:
            self._items.move_to_end(cid)
        return conv

    def _append(self, conv: Conversation, items: list[dict]) -> None:
        added = sum(item_chars(i) for i in items)
        if conv.chars + added > self.max_chars:
            raise ConversationFull(f"conversation {conv.id} would hold over {self.max_chars:,} characters")
        conv.items.extend(dict(i) for i in items)
        conv.chars += added
        self._chars += added
        self._evict()

    def _evict(self) -> None:
        while len(self._items) > 1 and (len(self._items) > self.max_conversations or self._chars > self.max_chars):
            _, gone = self._items.popitem(last=False)
            self._chars -= gone.chars


__all__ = ["Conversation", "ConversationFull", "ConversationStore", "MAX_CHARS", "MAX_CONVERSATIONS"]
