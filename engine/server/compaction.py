"""Compaction of a Responses conversation: ``POST /v1/responses/compact``'s, and the server-side compaction a
``POST /v1/responses`` request turns on with ``context_management`` (OpenAI's ``[{"type": "compaction",
"compact_threshold": N}]``).

Both end in a ``compaction`` item whose content the model's summary of the conversation is in. The content is
Hearth's own, a prefix and base64 (not a secret: OpenAI encrypts its own, and one of those cannot be read here):

- ``/compact``'s item (:data:`PREFIX`) holds the summary alone: its output is the conversation's user messages and
  then the item, and the client gives that list back in place of the conversation.
- A server-side item (:data:`WHOLE_PREFIX`) stands for the whole conversation before it: its newest user messages
  (:func:`newest_within`) and the summary are in it. The client appends it to its input with the rest of the output, as OpenAI's guide says,
  and everything before it but the system messages is left out from then on (OpenAI: "the latest compaction item
  carries the necessary context"; dropping the items before it only makes the request smaller).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from engine.errors import ContextLengthExceeded, InvalidRequest
from engine.model_defaults import left_unset
from engine.server.dialect import DialectRun, without_oldest
from engine.types import MEDIA_MARKER, ChatMessage, GenerationRequest, SamplingParams

#: How ``/compact``'s item content starts: the summary follows in base64.
PREFIX = "hearth-compaction-v1:"
#: How a server-side item's content starts: ``{"users": [...], "summary": ...}`` follows, as JSON in base64.
WHOLE_PREFIX = "hearth-compaction-v2:"
#: What the model is asked for, after the conversation it compacts.
ASK = (
    "Write a summary of our conversation so far, to be read in place of it when we go on: what I asked for and why, "
    "what was done and found (files, commands, results, errors, decisions), what is still to do, and anything the "
    "next step needs word for word. Write only the summary."
)
#: How the summary reads when a later request gives the item back.
SUMMARY_LEAD = "A summary of our earlier conversation, which was compacted to save room:\n\n"
#: The longest summary, in tokens.
MAX_TOKENS = 4096
#: The shortest bound on a server-side summary (half the threshold, where that is less than MAX_TOKENS).
MIN_TOKENS = 32


@dataclass(frozen=True)
class Compacted:
    """What a compaction item holds: the summary, and for a server-side item the user messages it stands for."""

    summary: str
    users: tuple[str, ...] | None = None  # None: /compact's item, which stands for the summary alone

    def messages(self) -> list[ChatMessage]:
        """The item as the model reads it: the user messages it carries, then the summary."""
        return [*(ChatMessage("user", u) for u in self.users or ()), ChatMessage("user", SUMMARY_LEAD + self.summary)]


def item(summary: str, users: list[str] | None = None) -> dict:
    """A compaction output item: ``/compact``'s (the summary) or, with ``users``, a server-side one."""
    if users is None:
        content = PREFIX + base64.b64encode(summary.encode()).decode()
    else:
        whole = json.dumps({"users": users, "summary": summary}, ensure_ascii=False)
        content = WHOLE_PREFIX + base64.b64encode(whole.encode()).decode()
    return {"type": "compaction", "id": f"cmp_{uuid.uuid4().hex}", "encrypted_content": content}


def read(content: Any, where: str, param: str = "input") -> Compacted:
    """What the compaction item with ``content`` holds.

    Raises:
        InvalidRequest: the item is not one Hearth made (another server's, encrypted for it) or it was altered.
    """
    if not isinstance(content, str) or not content.startswith((PREFIX, WHOLE_PREFIX)):
        raise InvalidRequest(f"{where} is a compaction item this server did not make (another server's is encrypted "
                             "for it); compact the conversation here with POST /v1/responses/compact, or send its "
                             "messages instead.", param=param)  # fmt: skip
    whole = content.startswith(WHOLE_PREFIX)
    try:
        text = base64.b64decode(content[len(WHOLE_PREFIX if whole else PREFIX) :], validate=True).decode()
        if not whole:
            return Compacted(text)
        held = json.loads(text)
        users, summary = held["users"], held["summary"]
        if not isinstance(summary, str) or not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            raise ValueError("not a compaction's content")
        return Compacted(summary, tuple(users))
    except (binascii.Error, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest(f"{where}.encrypted_content was changed and cannot be read; give it back as the "
                             "compaction returned it.", param=param) from exc  # fmt: skip


def replaces_earlier(items: list[dict]) -> bool:
    """Whether ``items`` hold a server-side compaction item: the conversation before them is then in it."""
    return any(isinstance(x, dict) and x.get("type") == "compaction" and isinstance(x.get("encrypted_content"), str)
               and x["encrypted_content"].startswith(WHOLE_PREFIX) for x in items)  # fmt: skip


def is_summary(message: ChatMessage) -> bool:
    """Whether ``message`` is an earlier compaction's summary (compacted again, it is summarised, not kept)."""
    return message.role == "user" and message.content.startswith(SUMMARY_LEAD)


def user_texts(history: tuple[ChatMessage, ...] | list[ChatMessage]) -> list[str]:
    """The conversation's user messages, as text (their pictures left out), earlier summaries not among them."""
    return [m.content.replace(MEDIA_MARKER, "") for m in history if m.role == "user" and not is_summary(m)]


#: Characters a token is taken to hold where the user messages kept whole are measured (few: English has about 4).
CHARS_PER_TOKEN = 3


def newest_within(texts: list[str], tokens: int) -> list[str]:
    """The newest of ``texts`` that fit in about ``tokens`` together (the newest always), in their order: the user
    messages a server-side compaction keeps whole. The older ones are in the summary only, so a conversation whose
    user messages alone pass the threshold still gets under it."""
    kept: list[str] = []
    room = tokens * CHARS_PER_TOKEN
    for text in reversed(texts):
        if kept and len(text) > room:
            break
        kept.append(text)
        room -= len(text)
    return kept[::-1]


def compactable(history: tuple[ChatMessage, ...] | list[ChatMessage]) -> bool:
    """Whether compacting ``history`` can make it shorter: the user messages are kept, so it needs something else."""
    return any(m.role != "system" and (m.role != "user" or is_summary(m)) for m in history)


def threshold(value: Any) -> tuple[bool, int | None]:
    """``context_management`` read: whether it turns compaction on, and its ``compact_threshold`` (None: compact only
    a conversation that does not fit the context).

    Raises:
        InvalidRequest: not a list of ``{"type": "compaction", "compact_threshold": N}`` entries.
    """
    if value is None:
        return False, None
    if not isinstance(value, list):
        raise InvalidRequest("'context_management' must be a list of entries such as {\"type\": \"compaction\", "
                             "\"compact_threshold\": 100000}.", param="context_management")  # fmt: skip
    on, least = False, None
    for i, entry in enumerate(value):
        where = f"context_management[{i}]"
        if not isinstance(entry, dict) or entry.get("type") != "compaction":
            raise InvalidRequest(f"{where} must have type 'compaction', the only context management there is.",
                                 param="context_management")  # fmt: skip
        n = entry.get("compact_threshold")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InvalidRequest(f"{where}.compact_threshold must be a whole number of tokens, at least 1.",
                                 param="context_management")  # fmt: skip
        on = True
        if n is not None:
            least = n if least is None else min(least, n)
    return on, least


async def summary_started(request: Request, model: str, system: tuple[ChatMessage, ...], history: tuple[ChatMessage, ...],
                          max_tokens: int, keep: float | None, ask: str = ASK,
                          like: GenerationRequest | None = None) -> DialectRun:  # fmt: skip
    """The model's summary of ``history`` (``ask`` after it), started; a conversation longer than the context is
    summarised from its newest messages that fit (the system messages kept). ``like``: the request it compacts,
    whose temperature, top_p and seed it is sampled with where that request gave them (a greedy request's summary
    is the same every time), else with the model's defaults."""
    given = {} if like is None else {f: getattr(like.params, f) for f in ("temperature", "top_p") if f not in like.unset}
    seed = None if like is None else like.params.seed
    req = GenerationRequest(model=model, messages=(*system, *history, ChatMessage("user", ask)),
                            params=SamplingParams(max_tokens=max_tokens, seed=seed, **given),
                            unset=left_unset({"temperature": given.get("temperature"), "top_p": given.get("top_p")}))  # fmt: skip
    try:
        return await DialectRun(request, req, keep_alive=keep).start()
    except ContextLengthExceeded as exc:
        fitted, fits = await without_oldest(request, req, exc.n_ctx)
        if not fits:
            raise
        return await DialectRun(request, fitted, keep_alive=keep).start()


def summary_tokens(compact_at: int | None, n_ctx: int | None = None) -> int:
    """The longest summary written to compact a conversation: half the threshold it is to get under, an eighth of the
    model's context, and MAX_TOKENS, whichever is least (but at least MIN_TOKENS)."""
    bounds = [MAX_TOKENS, *([compact_at // 2] if compact_at else []), *([n_ctx // 8] if n_ctx else [])]
    return max(MIN_TOKENS, min(bounds))


def users_tokens(compact_at: int | None, n_ctx: int | None = None) -> int:
    """The tokens of user messages a server-side compaction keeps whole: a quarter of the threshold (or of the
    context, without one), at least MIN_TOKENS."""
    return max(MIN_TOKENS, (compact_at or n_ctx or 4 * MAX_TOKENS) // 4)


__all__ = [
    "ASK",
    "MAX_TOKENS",
    "MIN_TOKENS",
    "PREFIX",
    "SUMMARY_LEAD",
    "WHOLE_PREFIX",
    "Compacted",
    "compactable",
    "is_summary",
    "newest_within",
    "item",
    "read",
    "replaces_earlier",
    "summary_started",
    "summary_tokens",
    "threshold",
    "user_texts",
    "users_tokens",
]
