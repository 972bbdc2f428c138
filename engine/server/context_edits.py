"""Anthropic's context editing (``context_management`` on ``POST /v1/messages`` and its ``count_tokens``, the
``context-management-2025-06-27`` beta): edits made to a conversation before the model reads it, the client's copy
left whole.

- ``clear_tool_uses_20250919``: once the prompt passes ``trigger`` (100,000 input tokens, or a number of tool uses),
  the results of the oldest tool uses become a short note, all but the ``keep`` newest (3) and those of
  ``exclude_tools``; with ``clear_tool_inputs`` (true, or a list of tool names) their calls' inputs go too. With
  ``clear_at_least``, nothing is cleared unless that many input tokens would be.
- ``clear_thinking_20251015``: the thinking of all but the ``keep`` newest assistant turns that thought (1; ``"all"``
  keeps every one) is left out.
- ``compact_20260112`` (Anthropic's server-side compaction): once the prompt passes ``trigger`` (150,000 input
  tokens), or on a local model does not fit its context, the conversation is summarised first and the answer
  begins with a ``compaction`` block holding the summary (engine.server.anthropic_routes); :func:`compaction_of`
  gives it, and :func:`apply` leaves it to the route.

A local model's context is small: clearing old tool results keeps a long agent loop within it. Each edit applied is
reported as Anthropic reports it, ``{"applied_edits": [{"type", "cleared_tool_uses" | "cleared_thinking_turns",
"cleared_input_tokens"}]}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import InvalidRequest
from engine.types import ChatMessage, GenerationRequest

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
#: Anthropic's server-side compaction of a conversation (its compact-2026-01-12 beta).
COMPACT = "compact_20260112"
#: Its default trigger, in input tokens.
DEFAULT_COMPACT_TOKENS = 150_000
#: What a cleared tool result reads as.
CLEARED = "[This tool result was cleared to save room in the context.]"
#: Anthropic's defaults: the prompt size that sets clearing off, and the tool uses kept.
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_USES = 3


@dataclass(frozen=True)
class ClearToolUses:
    trigger_tokens: int | None = DEFAULT_TRIGGER_TOKENS  # set off past this many input tokens
    trigger_uses: int | None = None  # or past this many tool uses
    keep: int = DEFAULT_KEEP_USES
    clear_at_least: int = 0
    exclude: frozenset[str] = frozenset()
    inputs: bool | frozenset[str] = False  # the calls' inputs too: all, or those of these tools


@dataclass(frozen=True)
class ClearThinking:
    keep: int | None = 1  # None: every turn's thinking is kept


@dataclass(frozen=True)
class Compact:
    trigger_tokens: int = DEFAULT_COMPACT_TOKENS  # compact past this many input tokens (or when it does not fit)
    pause: bool = False  # pause_after_compaction: the compaction block is the whole answer (stop_reason "compaction")
    instructions: str | None = None  # more words for the summary's writer


Edit = ClearToolUses | ClearThinking | Compact


def _count(value: Any, where: str, kind: str) -> int:
    """A ``{"type": kind, "value": N}`` object's N (at least 0)."""
    if not isinstance(value, dict) or value.get("type") != kind:
        raise InvalidRequest(f"{where} must be {{\"type\": \"{kind}\", \"value\": N}}.", param="context_management")
    n = value.get("value")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidRequest(f"{where}.value must be a whole number, 0 or more.", param="context_management")
    return n


def _names(value: Any, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise InvalidRequest(f"{where} must be a list of tool names.", param="context_management")
    return frozenset(value)


def parse(value: Any) -> list[Edit]:
    """``context_management`` read: its ``edits``, in order.

    Raises:
        InvalidRequest: not ``{"edits": [...]}`` of the edits above, each in its shape.
    """
    if value is None:
        return []
    if not isinstance(value, dict) or not isinstance(value.get("edits", []), list):
        raise InvalidRequest("'context_management' must be an object with a list of 'edits'.", param="context_management")
    edits: list[Edit] = []
    for i, edit in enumerate(value.get("edits", [])):
        where = f"context_management.edits[{i}]"
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == CLEAR_TOOL_USES:
            assert isinstance(edit, dict)
            trigger = edit.get("trigger")
            tokens, uses = DEFAULT_TRIGGER_TOKENS, None
            if trigger is not None:
                if isinstance(trigger, dict) and trigger.get("type") == "tool_uses":
                    tokens, uses = None, _count(trigger, f"{where}.trigger", "tool_uses")
                elif isinstance(trigger, dict) and trigger.get("type") == "input_tokens":
                    tokens = _count(trigger, f"{where}.trigger", "input_tokens")
                else:
                    raise InvalidRequest(f"{where}.trigger must be {{\"type\": \"input_tokens\", \"value\": N}} or "
                                         "{\"type\": \"tool_uses\", \"value\": N}.", param="context_management")  # fmt: skip
            keep = edit.get("keep")
            least = edit.get("clear_at_least")
            inputs = edit.get("clear_tool_inputs")
            if inputs is not None and not isinstance(inputs, bool):
                inputs = _names(inputs, f"{where}.clear_tool_inputs")
            edits.append(ClearToolUses(
                trigger_tokens=tokens, trigger_uses=uses,
                keep=DEFAULT_KEEP_USES if keep is None else _count(keep, f"{where}.keep", "tool_uses"),
                clear_at_least=0 if least is None else _count(least, f"{where}.clear_at_least", "input_tokens"),
                exclude=frozenset() if edit.get("exclude_tools") is None else _names(edit["exclude_tools"], f"{where}.exclude_tools"),
                inputs=bool(inputs) if not isinstance(inputs, frozenset) else inputs,
            ))  # fmt: skip
        elif kind == CLEAR_THINKING:
            assert isinstance(edit, dict)
            keep = edit.get("keep")
            if keep is None:
                edits.append(ClearThinking())
            elif keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
                edits.append(ClearThinking(keep=None))
            elif isinstance(keep, dict) and keep.get("type") == "thinking_turns":
                edits.append(ClearThinking(keep=_count(keep, f"{where}.keep", "thinking_turns")))
            else:
                raise InvalidRequest(f"{where}.keep must be {{\"type\": \"thinking_turns\", \"value\": N}} or \"all\".",
                                     param="context_management")  # fmt: skip
        elif kind == COMPACT:
            assert isinstance(edit, dict)
            trigger, pause, words = edit.get("trigger"), edit.get("pause_after_compaction"), edit.get("instructions")
            if trigger is not None and not (isinstance(trigger, dict) and trigger.get("type") == "input_tokens"):
                raise InvalidRequest(f"{where}.trigger must be {{\"type\": \"input_tokens\", \"value\": N}}.",
                                     param="context_management")  # fmt: skip
            tokens = DEFAULT_COMPACT_TOKENS if trigger is None else _count(trigger, f"{where}.trigger", "input_tokens")
            if pause is not None and not isinstance(pause, bool):
                raise InvalidRequest(f"{where}.pause_after_compaction must be true or false.", param="context_management")
            if words is not None and not isinstance(words, str):
                raise InvalidRequest(f"{where}.instructions must be text.", param="context_management")
            edits.append(Compact(max(1, tokens), bool(pause), words or None))
        else:
            said = f"has type '{kind}', which Hearth does not know" if isinstance(kind, str) else "has no type"
            raise InvalidRequest(f"{where} {said}; use {CLEAR_TOOL_USES}, {CLEAR_THINKING} or {COMPACT}, or leave it out.",
                                 param="context_management")  # fmt: skip
    return edits


def _cleared_tool_uses(messages: tuple[ChatMessage, ...], edit: ClearToolUses) -> tuple[tuple[ChatMessage, ...], int]:
    """``messages`` with the results (and inputs, where asked) of all but the newest ``edit.keep`` tool uses cleared,
    and how many uses were changed. Uses are told apart by where they stand (a client may number its ids per
    answer); a result answers the latest use of its id before it."""
    uses = [(i, j) for i, m in enumerate(messages) if m.role == "assistant" for j in range(len(m.tool_calls))]
    kept = set(uses[len(uses) - edit.keep :]) if edit.keep else set()
    cleared = {(i, j) for i, j in uses if (i, j) not in kept and messages[i].tool_calls[j].name not in edit.exclude}
    out = list(messages)
    changed: set[tuple[int, int]] = set()
    latest: dict[str | None, tuple[int, int]] = {}  # a call id -> the latest use of it so far
    for i, m in enumerate(messages):
        if m.role == "assistant":
            calls = list(m.tool_calls)
            for j, c in enumerate(calls):
                latest[c.id] = (i, j)
                inputs = edit.inputs is True or (isinstance(edit.inputs, frozenset) and c.name in edit.inputs)
                if (i, j) in cleared and inputs and c.arguments != "{}":
                    calls[j] = replace(c, arguments="{}")
                    changed.add((i, j))
            out[i] = replace(m, tool_calls=tuple(calls)) if calls != list(m.tool_calls) else m
        elif m.role == "tool" and (use := latest.get(m.tool_call_id)) in cleared and (m.content != CLEARED or m.media):
            out[i] = replace(m, content=CLEARED, media=())
            changed.add(use)
    return tuple(out), len(changed)


def _cleared_thinking(messages: tuple[ChatMessage, ...], keep: int) -> tuple[tuple[ChatMessage, ...], int]:
    thought = [i for i, m in enumerate(messages) if m.role == "assistant" and m.reasoning]
    drop = set(thought[: max(0, len(thought) - keep)])
    return tuple(replace(m, reasoning=None) if i in drop else m for i, m in enumerate(messages)), len(drop)


def compaction_of(edits: list[Edit]) -> Compact | None:
    """The compaction ``edits`` ask for (the last, where several do), or None."""
    found = [e for e in edits if isinstance(e, Compact)]
    return found[-1] if found else None


async def apply(req: GenerationRequest, edits: list[Edit], count: Callable[[GenerationRequest], Awaitable[int | None]]
                ) -> tuple[GenerationRequest, list[dict]]:  # fmt: skip
    """``req`` with ``edits`` made to its messages, in order, and the edits applied as Anthropic reports them;
    ``count``: a request's prompt in tokens (None where it cannot be counted: a remote model's, whose trigger in
    tokens is then never reached)."""
    applied: list[dict] = []
    for edit in edits:
        messages = req.messages or ()
        before: int | None = None
        if isinstance(edit, Compact):  # the route's, after the others (it needs the model to write the summary)
            continue
        if isinstance(edit, ClearToolUses):
            if edit.trigger_uses is not None:
                if sum(len(m.tool_calls) for m in messages if m.role == "assistant") <= edit.trigger_uses:
                    continue
            else:
                before = await count(req)
                if before is None or edit.trigger_tokens is None or before <= edit.trigger_tokens:
                    continue
            edited, n = _cleared_tool_uses(messages, edit)
            kind, counted = CLEAR_TOOL_USES, "cleared_tool_uses"
        else:
            if edit.keep is None:
                continue
            edited, n = _cleared_thinking(messages, edit.keep)
            kind, counted = CLEAR_THINKING, "cleared_thinking_turns"
        if not n:
            continue
        if before is None:
            before = await count(req)
        candidate = replace(req, messages=edited)
        after = await count(candidate)
        freed = max(0, before - after) if before is not None and after is not None else 0
        if isinstance(edit, ClearToolUses) and freed < edit.clear_at_least:
            continue
        req = candidate
        applied.append({"type": kind, counted: n, "cleared_input_tokens": freed})
    return req, applied


__all__ = [
    "CLEARED",
    "CLEAR_THINKING",
    "CLEAR_TOOL_USES",
    "COMPACT",
    "DEFAULT_COMPACT_TOKENS",
    "ClearThinking",
    "ClearToolUses",
    "Compact",
    "Edit",
    "apply",
    "compaction_of",
    "parse",
]
