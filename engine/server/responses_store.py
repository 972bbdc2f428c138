"""The bounded in-memory store behind ``previous_response_id`` and ``GET /v1/responses/{id}``."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from engine.types import ChatMessage

STORE_MAX_RESPONSES = 256
STORE_MAX_CHARS = 32_000_000


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A finished response, the conversation it ends (to continue from) and its input items; a streamed
    response also keeps its stream's events, for a client that reads them again from where it left off."""

    response: dict
    conversation: tuple[ChatMessage, ...]
    input_items: tuple[dict, ...]
    events: tuple[bytes, ...] = ()
    events_lost: bool = False  # streamed, but its events were too many to keep: it replays only whole
    # Its size in characters, counted once (a response with every token's log-probabilities takes tens of
    # milliseconds to count, on the event loop): the store adds it, and takes it away when it goes.
    chars: int = field(default=-1, compare=False)

    def __post_init__(self) -> None:
        if self.chars < 0:
            object.__setattr__(self, "chars", self._count())

    def _count(self) -> int:
        text = sum(len(m.content) + len(m.reasoning or "") + sum(len(c.arguments) for c in m.tool_calls) for m in self.conversation)
        return text + len(str(self.response)) + len(str(self.input_items)) + sum(len(e) for e in self.events)

    def with_events(self, events: tuple[bytes, ...], *, lost: bool) -> StoredResponse:
        """This response with its stream's ``events`` kept (none, and ``lost``, when they were too many)."""
        chars = self.chars - sum(len(e) for e in self.events) + sum(len(e) for e in events)
        return StoredResponse(self.response, self.conversation, self.input_items, events, lost, chars)


class ResponseStore:
    """The last responses, kept for ``previous_response_id`` and ``GET``: at most ``max_responses``,
    and at most ``max_chars`` of text together; the oldest go first. Thread-safe."""

    def __init__(self, max_responses: int = STORE_MAX_RESPONSES, max_chars: int = STORE_MAX_CHARS) -> None:
        self.max_responses = max_responses
        self.max_chars = max_chars
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, rid: str, stored: StoredResponse) -> None:
        with self._lock:
            old = self._items.pop(rid, None)
            if old is not None:
                self._chars -= old.chars
            self._items[rid] = stored
            self._chars += stored.chars
            while self._items and (len(self._items) > self.max_responses or self._chars > self.max_chars):
                _, gone = self._items.popitem(last=False)
                self._chars -= gone.chars

    def get(self, rid: str) -> StoredResponse | None:
        with self._lock:
            return self._items.get(rid)

    def delete(self, rid: str) -> bool:
        with self._lock:
            old = self._items.pop(rid, None)
            if old is not None:
                self._chars -= old.chars
            return old is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


__all__ = ["ResponseStore", "StoredResponse", "STORE_MAX_RESPONSES", "STORE_MAX_CHARS"]
