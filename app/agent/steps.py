"""What an answer did before its text: its thinking and its tool calls, kept beside the chat store.

One row per answer message in ``agent-steps.db`` (SQLite, next to the chats), rewritten as steps
finish, so an answer stopped or cut off mid-loop keeps every finished step.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class AnswerSteps:
    """Thinking (text, seconds, tokens), tool calls (``ToolCallRecord.as_dict()``) and notices
    (a server that failed, the round limit)."""

    reasoning: str = ""
    thinking_seconds: float | None = None
    thinking_tokens: int = 0
    thinking_done: bool = False
    calls: list[dict] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.reasoning or self.calls or self.notices)

    def upsert_call(self, call: dict) -> None:
        for i, c in enumerate(self.calls):
            if c["id"] == call["id"]:
                self.calls[i] = call
                return
        self.calls.append(call)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> AnswerSteps:
        data = json.loads(text)
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


class StepsStore:
    """``agent-steps.db`` in ``folder`` (created if missing)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "agent-steps.db"
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS steps (message_id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
        self._db.commit()
        self._lock = threading.Lock()
        self._cache: dict[int, AnswerSteps | None] = {}

    def get(self, message_id: int) -> AnswerSteps | None:
        if message_id not in self._cache:
            with self._lock:
                row = self._db.execute("SELECT data FROM steps WHERE message_id = ?", (message_id,)).fetchone()
            try:
                self._cache[message_id] = AnswerSteps.from_json(row[0]) if row else None
            except (ValueError, TypeError):
                self._cache[message_id] = None
        return self._cache[message_id]

    def put(self, message_id: int, steps: AnswerSteps) -> None:
        self._cache[message_id] = steps
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO steps (message_id, data) VALUES (?, ?)", (message_id, steps.to_json())
            )
            self._db.commit()

    def close(self) -> None:
        self._db.close()


def steps_markdown(steps: AnswerSteps | None) -> list[str]:
    """Markdown lines for an export: the thinking as a quote, each call with its result."""
    if steps is None or steps.empty:
        return []
    lines: list[str] = []
    if steps.reasoning:
        took = f" ({steps.thinking_seconds:.1f} s)" if steps.thinking_seconds else ""
        lines += [f"**Thinking**{took}", ""] + [f"> {line}" for line in steps.reasoning.splitlines()] + [""]
    for c in steps.calls:
        lines += [f"**Tool call** `{c['name']}` ({c['status']}): `{c['arguments']}`", "", "```text", c["result"], "```", ""]
    return lines


__all__ = ["AnswerSteps", "StepsStore", "steps_markdown"]
