"""Documents kept with chats, as JSON in their rows: the collections a chat has attached
(``chats.doc_collections``) and the passages each answer was given (``messages.doc_sources``).

A row that cannot be read shows as nothing attached or no sources, never as an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from app.store.records import DocSource

log = logging.getLogger(__name__)

# A source keeps the beginning of its passage: enough to show and export, not the whole document
# (a collection small enough goes into the prompt whole, every file one source).
SOURCE_TEXT_CHARS = 1000


def collections_json(names: Iterable[str]) -> str:
    return json.dumps(sorted({str(n) for n in names if str(n).strip()}), ensure_ascii=False)


def collections_from(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        names = json.loads(text)
    except ValueError:
        log.warning("a chat's attached collections cannot be read: %.80r", text)
        return ()
    return tuple(str(n) for n in names) if isinstance(names, list) else ()


def sources_json(sources: Iterable[DocSource]) -> str | None:
    items = [{**s.as_dict(), "text": s.text[:SOURCE_TEXT_CHARS]} for s in sources]
    return json.dumps(items, ensure_ascii=False) if items else None


def sources_from(text: str | None) -> tuple[DocSource, ...]:
    if not text:
        return ()
    try:
        items = json.loads(text)
        return tuple(DocSource.from_json(d) for d in items)
    except (ValueError, TypeError, KeyError, AttributeError):
        log.warning("an answer's sources cannot be read: %.80r", text)
        return ()


__all__ = ["SOURCE_TEXT_CHARS", "collections_from", "collections_json", "sources_from", "sources_json"]
