"""Anthropic's Messages API on the same port: ``POST /v1/messages``, ``/v1/messages/count_tokens``,
and the model list for clients that send ``anthropic-version`` (Claude Code and other Anthropic-SDK apps).

A request becomes one :class:`GenerationRequest` (see :mod:`engine.server.dialect`); the answer
comes back as content blocks, streamed with Anthropic's event sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import Field, StrictBool
from starlette.routing import Match

from engine.errors import ContextLengthExceeded, InvalidRequest, RequestCancelled
from engine.model_defaults import left_unset
from engine.remote.routing import is_local
from engine.server import compaction, context_edits, docs_chat, media, remote_routes, targets
from engine.server.api_models import Body, KeepAlive
from engine.server.dialect import (
    ANTHROPIC_OVERLOADED,
    DialectRun,
    anthropic_error,
    context_of,
    count_prompt_tokens,
    error_route,
)
from engine.server.errors import error_info
from engine.server.generation import STREAM_HEADERS, streamed
from engine.server.streaming import KEEPALIVE_SECONDS, ticks
from engine.tools import ToolCall, parse_tool_choice, parse_tools
from engine.types import (
    MEDIA_MARKER,
    ChatMessage,
    GenerationChunk,
    GenerationRequest,
    MediaInput,
    ResponseFormat,
    SamplingParams,
    answer_begun,
)
from engine.validation import request_keep_alive

router = APIRouter(prefix="/v1", route_class=error_route(anthropic_error, overloaded=ANTHROPIC_OVERLOADED))


class _AnthropicModelsRoute(error_route(anthropic_error)):
    """``/v1/models`` in Anthropic's shape, only for requests that carry ``anthropic-version``
    (the Anthropic SDK always does); every other client gets OpenAI's list from the same path."""

    def matches(self, scope):
        match, child = super().matches(scope)
        if match is not Match.NONE and not any(k == b"anthropic-version" for k, _ in scope.get("headers") or ()):
            return Match.NONE, {}
        return match, child


models_router = APIRouter(prefix="/v1", route_class=_AnthropicModelsRoute)


class MessageBody(Body):
    role: str
    content: str | list[dict[str, Any]]


class CountTokensBody(Body):
    model: str = Field(min_length=1)
    messages: list[MessageBody]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    context_management: Any = None  # the context-management beta's edits (engine.server.context_edits)


class MessagesBody(CountTokensBody):
    max_tokens: int
    stop_sequences: list[str] | None = None
    stream: StrictBool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    metadata: dict[str, Any] | None = None
    ignore_eos: StrictBool = False  # an extension, as in chat completions: generate to max_tokens
    speculative: StrictBool | None = None  # an extension, as in chat completions: false turns drafting off
    keep_alive: KeepAlive = None  # an extension, as in chat completions: Ollama's keep_alive
    # the compact-2026-01-12 beta's compaction request: the conversation summarised now, the block alone the answer
    compaction: dict[str, Any] | None = None


def _compaction_asked(body: MessagesBody) -> context_edits.Compact | None:
    """The top-level ``compaction`` (``{"type": "summarize", "instructions"?}``) as a compaction that pauses after
    its block: the whole answer; None without one.

    Raises:
        InvalidRequest: another type, instructions that are not text, or beside ``context_management``.
    """
    asked = body.compaction
    if asked is None:
        return None
    if asked.get("type") != "summarize":
        raise InvalidRequest("'compaction.type' must be \"summarize\".", param="compaction.type")
    instructions = asked.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("'compaction.instructions' must be text.", param="compaction.instructions")
    if body.context_management is not None:
        raise InvalidRequest("'compaction' cannot be combined with 'context_management'; send one of them.",
                             param="compaction")  # fmt: skip
    return context_edits.Compact(pause=True, instructions=(instructions or "").strip() or None)


def _text_of(blocks: Any, where: str) -> str:
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    if not isinstance(blocks, list):
        raise InvalidRequest(f"'{where}' must be text or a list of text blocks.", param=where)
    parts = []
    for j, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InvalidRequest(f"{where}[{j}] must be a text block with 'text'.", param=where)
        parts.append(block["text"])
    return "".join(parts)  # as chat completions joins its text parts (and llama.cpp's server): one prompt for both


def _tool_result(block: dict[str, Any], where: str, names: dict[str, str], allow_remote: bool) -> ChatMessage:
    """A ``tool_result`` block as a tool message: its ``content`` a string or ``text``, ``image`` and text ``document``
    blocks (a tool that reads a picture answers with one), each picture at a media marker in the text."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{where} is a tool_result without 'tool_use_id'.", param="messages")
    content = block.get("content")
    pictures: list[MediaInput] = []
    if isinstance(content, list):
        parts: list[str] = []
        for j, part in enumerate(content):
            at = f"{where}.content[{j}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image":
                pictures.append(_image(part, at, allow_remote))
                parts.append(MEDIA_MARKER)
            elif kind == "document" and (doc := _document_text(part)) is not None:
                parts.append(doc)
            elif kind == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise InvalidRequest(f"{at} must be a text block with 'text', an image or a text document.", param="messages")
        text = "".join(parts)  # joined as a message's blocks are
    else:
        text = _text_of(content, f"{where}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    return ChatMessage("tool", text, tool_call_id=call_id, name=names.get(call_id), media=tuple(pictures))


def _image(block: dict, where: str, allow_remote: bool) -> MediaInput:
    """An ``image`` block's picture: a base64 source, or a URL one (fetched only with --allow-image-urls)."""
    source = given if isinstance(given := block.get("source"), dict) else {}
    if source.get("type") == "base64" and isinstance(data := source.get("data"), str):
        return media.image_from_base64(data, where)
    if source.get("type") == "url" and isinstance(url := source.get("url"), str):
        return media.image_from_url(url, where, allow_remote=allow_remote)
    raise InvalidRequest(f"{where} needs a source of type base64 (with data) or url.", param=where)


def _messages(body: CountTokensBody, allow_remote: bool = False) -> tuple[ChatMessage, ...]:
    out: list[ChatMessage] = []
    system = _text_of(body.system, "system")
    if system:
        out.append(ChatMessage("system", system))
    names: dict[str, str] = {}  # tool_use id -> tool name, for the results that answer them
    for i, m in enumerate(body.messages):
        if m.role == "system":  # Claude Code's reminders between turns: a system message where it stands
            out.append(ChatMessage("system", _text_of(m.content, f"messages[{i}]")))
            continue
        if m.role not in ("user", "assistant"):
            raise InvalidRequest(f"messages[{i}].role must be 'user', 'assistant' or 'system', got '{m.role}'.", param="messages")
        if isinstance(m.content, str):
            out.append(ChatMessage(m.role, m.content))
            continue
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCall] = []
        pictures: list[MediaInput] = []
        compacted = False  # a compaction block in this message: what came before it is in its summary
        for j, block in enumerate(m.content):
            kind = block.get("type")
            where = f"messages[{i}].content[{j}]"
            if kind == "compaction" and m.role == "assistant":
                summary = block.get("content")
                if summary is None:  # a compaction that failed: a no-op, as Anthropic treats it
                    continue
                if not isinstance(summary, str) or not summary.strip():
                    raise InvalidRequest(f"{where} is a compaction block whose 'content' is not its summary; give the "
                                         "block back as it came, or leave it out.", param="messages")  # fmt: skip
                # Anthropic's compaction: the conversation before the block is read as its summary alone
                out[:] = [x for x in out if x.role == "system"]
                out.append(ChatMessage("user", compaction.SUMMARY_LEAD + summary))
                texts, thoughts, calls, pictures, compacted = [], [], [], [], True
            elif kind == "text":
                if not isinstance(block.get("text"), str):
                    raise InvalidRequest(f"{where} is a text block without 'text'.", param="messages")
                texts.append(block["text"])
            elif kind == "thinking" and m.role == "assistant":
                thoughts.append(str(block.get("thinking") or ""))
            elif kind == "redacted_thinking":
                continue
            elif kind == "tool_use" and m.role == "assistant":
                name, call_id = block.get("name"), block.get("id")
                if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
                    raise InvalidRequest(f"{where} is a tool_use without 'id' and 'name'.", param="messages")
                names[call_id] = name
                calls.append(ToolCall(name=name, arguments=json.dumps(block.get("input") or {}, ensure_ascii=False), id=call_id))
            elif kind == "tool_result" and m.role == "user":
                out.append(_tool_result(block, where, names, allow_remote))
            elif kind == "image" and m.role == "user":
                pictures.append(_image(block, where, allow_remote))
                texts.append(MEDIA_MARKER)
            elif kind == "document" and _document_text(block) is not None:
                texts.append(_document_text(block) or "")
            elif kind in ("image", "document"):
                raise InvalidRequest(
                    f"{where} is {'an image' if kind == 'image' else 'a document'} block that is not text; Hearth's models here read text only, send it as text.",
                    param="messages",
                )
            else:
                raise InvalidRequest(f"{where} has type '{kind}', which Hearth does not support here.", param="messages")
        if compacted and not (texts or calls or thoughts):  # the block alone: its summary stands for the turn
            continue
        if texts or calls or m.role == "assistant" or not any(b.get("type") == "tool_result" for b in m.content):
            # Blocks joined as chat completions joins its parts, so a conversation is the same prompt in every dialect.
            out.append(ChatMessage(m.role, "".join(texts), tool_calls=tuple(calls), reasoning="".join(thoughts) or None,
                                   media=tuple(pictures)))
    if not out or all(m.role == "system" for m in out):
        raise InvalidRequest("'messages' must hold at least one user or assistant message (a system prompt alone "
                             "has nothing to answer).", param="messages")  # fmt: skip
    return tuple(out)


def _document_text(block: dict) -> str | None:
    """A ``document`` block given as text (a ``text`` source, or a ``content`` source of text blocks) as the prompt
    reads it: its title and context, then the text; None for any other source (a PDF, a file id)."""
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        body = source["data"]
    elif source.get("type") == "content" and isinstance(source.get("content"), str):
        body = source["content"]
    elif source.get("type") == "content" and isinstance(source.get("content"), list):
        parts = source["content"]
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts):
            return None
        body = "\n\n".join(p["text"] for p in parts)
    else:
        return None
    head = [str(block[k]) for k in ("title", "context") if isinstance(block.get(k), str) and block[k]]
    return "\n\n".join([*head, body])


def _tools(body: CountTokensBody) -> dict[str, Any]:
    """The request's tools, tool choice and thinking switch as GenerationRequest fields."""
    specs = []
    for i, tool in enumerate(body.tools or ()):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise InvalidRequest(f"tools[{i}] has type '{kind}'; Hearth runs only your own tools (with input_schema).", param="tools")
        specs.append({"type": "function", "function": {"name": tool.get("name"), "description": tool.get("description") or "",
                                                       "parameters": tool.get("input_schema"), "strict": tool.get("strict")}})  # fmt: skip
    tools = parse_tools(specs)
    choice = body.tool_choice or {"type": "auto"}
    kind = choice.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        raise InvalidRequest("'tool_choice.type' must be auto, any, tool or none.", param="tool_choice")
    value = {"auto": "auto", "any": "required", "none": "none"}.get(kind) or {"type": "function", "name": choice.get("name")}
    thinking = (body.thinking or {}).get("type")
    if thinking not in (None, "enabled", "disabled", "adaptive", "between_tools"):
        raise InvalidRequest("'thinking.type' must be enabled, disabled or adaptive.", param="thinking")
    if thinking == "enabled":
        _check_budget((body.thinking or {}).get("budget_tokens"))
    return {
        "tools": tools,
        "tool_choice": parse_tool_choice(value, tools),
        "parallel_tool_calls": None if (off := choice.get("disable_parallel_tool_use")) is None else off is False,
        "thinking": {"enabled": True, "disabled": False}.get(thinking) if thinking is not None else None,
    }


def _check_budget(budget: Any) -> None:
    """Refuse a ``thinking.budget_tokens`` that is no count of tokens. Anthropic's own lower bound (1024) and its
    rule that the budget be below ``max_tokens`` are not applied: a small local budget is a fair request, and an
    answer that reaches ``max_tokens`` first ends there as Claude's does. The budget is enforced: the thinking is
    closed for the model once it has taken that many tokens (engine.tools.thinking_budget)."""
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise InvalidRequest(f"'thinking.budget_tokens' must be a whole number of tokens, got {json.dumps(budget)}.",
                             param="thinking.budget_tokens")  # fmt: skip


def _format(body: CountTokensBody) -> ResponseFormat:
    fmt = (body.output_config or {}).get("format")
    if fmt is None:
        return ResponseFormat()
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise InvalidRequest("'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}.", param="output_config")
    return ResponseFormat(type="json_schema", schema=fmt["schema"])


def _params(body: MessagesBody) -> SamplingParams:
    if body.max_tokens < 0:
        raise InvalidRequest("'max_tokens' must be at least 1 (or 0, to read the prompt into the cache only).", param="max_tokens")
    if body.temperature is not None and not 0.0 <= body.temperature <= 1.0:
        raise InvalidRequest("'temperature' must be between 0 and 1.", param="temperature")
    thinking = body.thinking if isinstance(body.thinking, dict) else {}
    budget = thinking.get("budget_tokens") if thinking.get("type") == "enabled" else None
    _check_budget(budget)
    return SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k or 0,
        stop=tuple(body.stop_sequences or ()),
        max_tokens=body.max_tokens or 1,  # 0: the prompt is read (and cached), its one token not given
        ignore_eos=body.ignore_eos,
        thinking_budget=budget,
    )


def _unset(body: CountTokensBody) -> frozenset[str]:
    """The sampling fields the client left out, which a model's own defaults may fill (engine.model_defaults)."""
    return left_unset({"temperature": getattr(body, "temperature", None), "top_p": getattr(body, "top_p", None),
                       "top_k": getattr(body, "top_k", None), "stop": getattr(body, "stop_sequences", None),
                       "max_tokens": getattr(body, "max_tokens", None)})  # fmt: skip


def _request(body: CountTokensBody, params: SamplingParams | None = None, allow_remote: bool = False) -> GenerationRequest:
    messages = _messages(body, allow_remote)
    if answer_begun(messages) and messages[-1].content != messages[-1].content.rstrip():
        # as Anthropic refuses it: a model going on from a space writes a word split in two
        raise InvalidRequest("The final assistant message (the answer's start) ends with whitespace; send it without "
                             "the trailing whitespace.", param="messages")  # fmt: skip
    return GenerationRequest(
        model=body.model,
        messages=messages,
        continue_final=answer_begun(messages),  # a last assistant turn is the answer's start, as Claude goes on with it
        params=params or SamplingParams(),
        unset=_unset(body),
        response_format=_format(body),
        speculative=getattr(body, "speculative", None),
        **_tools(body),
    )


def _stop_reason(final: GenerationChunk, asked: int | None) -> tuple[str, str | None]:
    """The answer's ``stop_reason`` and ``stop_sequence``; ``asked``: its ``max_tokens``."""
    if final.finish_reason == "length":  # a call cut short too: its input is what was written of it
        if asked is not None and 0 < final.completion_tokens < asked:  # the context filled first, as Anthropic says it
            return "model_context_window_exceeded", None
        return "max_tokens", None
    if final.finish_reason == "tool_calls" or final.tool_calls:
        return "tool_use", None
    if final.stop_sequence:
        return "stop_sequence", final.stop_sequence
    return "end_turn", None


def _usage(final: GenerationChunk, *, warm: bool = False, compacted: _Compacted | None = None) -> dict:
    """The answer's usage; after a compaction, with ``iterations``: the summary's, then the answer's (as Anthropic
    reports them, the summary's tokens left out of the rest)."""
    usage: dict[str, Any] = {
        "input_tokens": final.prompt_tokens - final.cached_tokens,
        "output_tokens": 0 if warm else final.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": final.cached_tokens,
    }
    if compacted is not None:
        usage["iterations"] = [compacted.usage, {"type": "message", **usage}]
    return usage


def _tool_use(call: ToolCall) -> dict:
    args = call.arguments_object
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": args if isinstance(args, dict) else {}}


def tool_use_id(call_id: str) -> str:
    """A call's id as Anthropic writes one (``toolu_``...)."""
    return "toolu_" + call_id.removeprefix("call_")


@router.post("/messages")
async def create_message(request: Request, body: MessagesBody):
    allow_remote = request.app.state.settings.allow_image_urls  # images are read (and fetched) off the event loop
    asked = _compaction_asked(body)  # a compaction request: compacts now, whatever the conversation's length
    edits = context_edits.parse(body.context_management)
    req = await asyncio.to_thread(_request, body, _params(body), allow_remote)
    keep = request_keep_alive(body.keep_alive)
    context: dict | None = None
    count = None
    if edits:
        count = await _counter(request, body.model)
        req, applied = await context_edits.apply(req, edits, count)
        context = {"applied_edits": applied}
    documents = docs_chat.documents_asked(body)
    compact = context_edits.compaction_of(edits) if body.max_tokens != 0 else None  # (a pre-warming reads, no more)
    mid = f"msg_{uuid.uuid4().hex}"
    compacted: _Compacted | None = None
    if asked is not None:
        compact, run = asked, None
    elif compact is None or count is None:
        run = await DialectRun(request, req, documents=documents, keep_alive=keep).start()
    else:
        run = await _as_it_is(request, req, compact, keep, documents, count)
    if run is None and compact is not None:
        compacting = compact

        def start() -> Awaitable[tuple[DialectRun | None, _Compacted]]:
            return _compacted_start(request, body, req, compacting, keep, documents)

        if body.stream:  # the summary takes a while: the stream opens now, with keep-alives until the answer begins
            return StreamingResponse(_compacting_events(start, mid, context), media_type="text/event-stream",
                                     headers=STREAM_HEADERS)  # fmt: skip
        run, compacted = await start()
    if run is None:  # pause_after_compaction: the compaction block is the whole answer
        assert compacted is not None
        paused = _paused(mid, compacted, context)
        if body.stream:
            return StreamingResponse(_paused_events(paused), media_type="text/event-stream", headers=STREAM_HEADERS)
        return paused
    warm = body.max_tokens == 0  # Anthropic's pre-warming of the prompt cache: no answer
    if body.stream:
        return streamed(run.gen, _events(run, mid, warm=warm, context=context, compacted=compacted))
    text, thinking, final = await run.collect()
    content: list[dict] = [compacted.block()] if compacted is not None else []
    if thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": ""})
    if text or not final.tool_calls:
        content.append({"type": "text", "text": text})
    content += [_tool_use(c) for c in final.tool_calls]
    stop_reason, stop_sequence = _stop_reason(final, run.req.params.max_tokens)
    if warm:
        content, stop_reason, stop_sequence = [], "max_tokens", None
    message = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": run.model_name,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(final, warm=warm, compacted=compacted),
    }
    if context is not None:
        message["context_management"] = context
    return run.with_sources(message)


@dataclass(frozen=True)
class _Compacted:
    """A conversation compacted before its answer (``compact_20260112``): the model's summary of it, the model, and
    the summary's generation's usage (an iteration of its own, left out of the answer's)."""

    summary: str | None  # None: the model wrote none (a failed compaction, whose block's content is null)
    model: str
    usage: dict

    def block(self) -> dict:
        return {"type": "compaction", "content": self.summary}


async def _as_it_is(request: Request, req: GenerationRequest, compact: context_edits.Compact, keep: float | None,
                    documents: Any, count: Callable[[GenerationRequest], Awaitable[int | None]]) -> DialectRun | None:  # fmt: skip
    """The answer's generation started on the conversation as it is, while its prompt is under the compaction's
    trigger and fits the context (a remote model's is sent as it is: its tokens are not counted here); None where it
    is to be compacted first (:func:`_compacted_start`).

    Raises:
        ContextLengthExceeded: the conversation does not fit, and compacting cannot make it shorter.
    """
    messages = req.messages or ()
    tokens = await count(req)
    if tokens is None or not compaction.compactable(messages) or tokens < compact.trigger_tokens:
        try:
            return await DialectRun(request, req, documents=documents, keep_alive=keep).start()
        except ContextLengthExceeded:
            if tokens is None or not compaction.compactable(messages):
                raise
    return None


async def _compacted_start(request: Request, body: MessagesBody, req: GenerationRequest, compact: context_edits.Compact,
                           keep: float | None, documents: Any) -> tuple[DialectRun | None, _Compacted]:  # fmt: skip
    """The conversation compacted, and the answer's generation started on the model's summary of it and its last step
    (:func:`_last_step`), or on the summary alone where those do not fit. None in place of the generation with
    ``pause_after_compaction``; a summary the model left empty is a failed compaction (its block's content null, as
    Anthropic's), and the answer is the conversation's own.

    Raises:
        RequestCancelled: the summary was cut short (its client went). ContextLengthExceeded, as without the edit.
    """
    messages = req.messages or ()
    _, n_ctx = await context_of(request, req, count=False)
    ask = compaction.ASK + (f"\n\n{compact.instructions}" if compact.instructions else "")
    longest = compaction.summary_tokens(compact.trigger_tokens, n_ctx)
    summary_run = await compaction.summary_started(request, body.model, (), messages, longest, keep, ask, like=req)
    text, thinking, final = await summary_run.collect()
    if final.finish_reason == "cancelled":  # its client went, or the worker gave it up: nothing is compacted
        raise RequestCancelled()
    summary = text.strip() or thinking.strip() or None
    compacted = _Compacted(summary, summary_run.model_name, {"type": "compaction", **_usage(final)})
    if compact.pause:
        return None, compacted
    if summary is None:
        return await DialectRun(request, req, documents=documents, keep_alive=keep).start(), compacted
    step = _last_step(messages)
    system = tuple(m for m in messages[: len(messages) - len(step)] if m.role == "system")
    read = ChatMessage("user", compaction.SUMMARY_LEAD + summary)
    try:
        answer = replace(req, messages=(*system, read, *step))
        return await DialectRun(request, answer, documents=documents, keep_alive=keep).start(), compacted
    except ContextLengthExceeded:  # the last step alone is too long: the summary holds it
        answer = replace(req, messages=(*system, read))
        return await DialectRun(request, answer, documents=documents, keep_alive=keep).start(), compacted


async def _compacting_events(start: Callable[[], Awaitable[tuple[DialectRun | None, _Compacted]]], mid: str,
                             context: dict | None) -> AsyncIterator[bytes]:  # fmt: skip
    """A streamed answer compacted first: the stream opens at once, with a keep-alive comment every 15 s while the
    summary is written (a long conversation's takes minutes on a CPU), then the compaction block and the answer's
    events; a failure before the answer began is the stream's error event."""
    task = asyncio.ensure_future(start())  # (begun here: a client gone before the stream's first byte starts nothing)
    run: DialectRun | None = None
    try:
        try:
            while not (await asyncio.wait({task}, timeout=KEEPALIVE_SECONDS))[0]:
                yield b": keep-alive\n\n"  # an SSE comment: no event may come before message_start
            run, compacted = task.result()
        except Exception as exc:
            info = error_info(exc)
            yield _event("error", anthropic_error(info.status, info.message))
            return
        if run is None:
            async for event in _paused_events(_paused(mid, compacted, context)):
                yield event
            return
        async for event in _events(run, mid, context=context, compacted=compacted):
            yield event
    finally:  # the client went: the summary (or the answer it began) is given up
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if run is None and task.done() and not task.cancelled() and task.exception() is None:
            run = task.result()[0]
        if run is not None:
            run.gen.abandon()


def _last_step(messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
    """What the answer reads after the summary: the conversation's trailing user, tool and system messages (a
    question, or the results of the calls just made), with the assistant message whose calls those results answer."""
    i = len(messages)
    while i > 0 and messages[i - 1].role in ("user", "tool", "system") and not compaction.is_summary(messages[i - 1]):
        i -= 1
    if i > 0 and i < len(messages) and messages[i - 1].role == "assistant" and messages[i - 1].tool_calls:
        i -= 1  # the calls, before their results
    while i < len(messages) and messages[i].role == "tool":  # results whose calls are in the summary only
        i += 1
    return messages[i:]


def _paused(mid: str, compacted: _Compacted, context: dict | None) -> dict:
    """The answer of a compaction with ``pause_after_compaction``: its block alone."""
    nothing = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": mid, "type": "message", "role": "assistant", "model": compacted.model, "content": [compacted.block()],
               "stop_reason": "compaction", "stop_sequence": None, "usage": {**nothing, "iterations": [compacted.usage]}}  # fmt: skip
    if context is not None:
        message["context_management"] = context
    return message


async def _paused_events(message: dict) -> AsyncIterator[bytes]:
    start = {**message, "content": [], "stop_reason": None, "usage": {k: 0 for k in message["usage"] if k != "iterations"}}
    yield _event("message_start", {"type": "message_start", "message": start})
    blocks = _Blocks()
    for event in blocks.compaction(message["content"][0]["content"]):
        yield event
    delta = {"type": "message_delta", "delta": {"stop_reason": "compaction", "stop_sequence": None}, "usage": message["usage"]}
    if "context_management" in message:
        delta["context_management"] = message["context_management"]
    yield _event("message_delta", delta)
    yield _event("message_stop", {"type": "message_stop"})


async def _counter(request: Request, model: str) -> Callable[[GenerationRequest], Awaitable[int | None]]:
    """How context edits count a prompt on ``model``: each request rendered and counted once; on a remote model not
    at all (None: its tokenizer is the provider's, so a trigger in tokens is never reached there)."""
    if not is_local(await targets.resolve(request, model)):

        async def uncounted(req: GenerationRequest) -> int | None:
            return None

        return uncounted
    counted: dict[int, tuple[GenerationRequest, int]] = {}

    async def count(req: GenerationRequest) -> int | None:
        hit = counted.get(id(req))
        if hit is not None and hit[0] is req:
            return hit[1]
        n = await count_prompt_tokens(request, req)
        counted[id(req)] = (req, n)
        return n

    return count


def _event(name: str, payload: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


class _Blocks:
    """Content blocks as they stream: one open at a time, each with its index."""

    def __init__(self) -> None:
        self.index = -1
        self.kind: str | None = None
        self.calls: dict[int, int] = {}  # tool call index -> block index

    def close(self) -> list[bytes]:
        if self.kind is None:
            return []
        self.kind = None
        return [_event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def open(self, kind: str, block: dict) -> list[bytes]:
        out = self.close()
        self.index += 1
        self.kind = kind
        out.append(_event("content_block_start", {"type": "content_block_start", "index": self.index, "content_block": block}))
        return out

    def delta(self, delta: dict) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def compaction(self, summary: str | None) -> list[bytes]:
        """A compaction block's events: its start, its whole summary in one delta, its end (as Anthropic streams it)."""
        out = self.open("compaction", {"type": "compaction", "content": None})
        if summary is not None:
            out.append(self.delta({"type": "compaction_delta", "content": summary}))
        return out + self.close()

    def feed(self, chunk: GenerationChunk) -> list[bytes]:
        out: list[bytes] = []
        if chunk.reasoning:
            if self.kind != "thinking":
                out += self.open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self.delta({"type": "thinking_delta", "thinking": chunk.reasoning}))
        if chunk.text:
            if self.kind != "text":
                out += self.open("text", {"type": "text", "text": ""})
            out.append(self.delta({"type": "text_delta", "text": chunk.text}))
        for d in chunk.tool_call_deltas:
            if d.id is not None:
                out += self.open("tool_use", {"type": "tool_use", "id": tool_use_id(d.id), "name": d.name, "input": {}})
                self.calls[d.index] = self.index
            if d.arguments and self.calls.get(d.index) == self.index:
                out.append(self.delta({"type": "input_json_delta", "partial_json": d.arguments}))
        return out


async def _events(run: DialectRun, mid: str, *, warm: bool = False, context: dict | None = None,
                  compacted: _Compacted | None = None) -> AsyncIterator[bytes]:  # fmt: skip
    """Anthropic's events for the answer; ``warm`` (``max_tokens`` 0): the prompt read, no content blocks.

    ``message_start`` waits for the first chunk, which says how much of the prompt the cache held (the first
    token's, or the final one's), so that its usage splits the prompt as ``message_delta``'s does; until then a
    comment every 15 s (``ticks``) keeps the connection open while the prompt is read."""
    chunks = ticks(run.chunks())
    try:
        async for event in _answer_events(run, mid, chunks, warm=warm, context=context, compacted=compacted):
            yield event
    finally:
        await chunks.aclose()


async def _answer_events(
    run: DialectRun, mid: str, chunks: AsyncGenerator[GenerationChunk | None], *, warm: bool, context: dict | None = None,
    compacted: _Compacted | None = None,
) -> AsyncIterator[bytes]:
    try:
        input_tokens = await run.prompt_tokens()
    except Exception:  # counted again by the engine, in message_delta
        input_tokens = 0
    first: GenerationChunk | None = None
    async for chunk in chunks:
        if chunk is not None:
            first = chunk
            break
        yield b": keep-alive\n\n"  # an SSE comment: no event may come before message_start
    cached = first.cached_tokens if first is not None and first.finish_reason != "error" else 0
    cached = min(cached, input_tokens)
    message = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": run.model_name,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens - cached, "output_tokens": 0, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": cached},
    }
    # a grounded answer's sources come with the message, before its text
    yield _event("message_start", {"type": "message_start", "message": run.with_sources(message)})
    yield _event("ping", {"type": "ping"})
    blocks = _Blocks()
    if compacted is not None:  # the compaction's block first, then the answer's
        for event in blocks.compaction(compacted.summary):
            yield event
    first_block = blocks.index + 1
    final = GenerationChunk(finish_reason="stop")

    async def rest() -> AsyncIterator[GenerationChunk]:
        if first is not None:
            yield first
        async for chunk in chunks:
            if chunk is not None:
                yield chunk

    async for chunk in rest():
        if chunk.finish_reason == "error":
            yield _event("error", anthropic_error(*run.failure_message(chunk)))
            return
        if chunk.finish_reason is not None:
            final = chunk
        if warm:
            continue
        for event in blocks.feed(chunk):
            yield event
    if blocks.index < first_block and not warm:  # an empty answer is still one (empty) text block
        for event in blocks.open("text", {"type": "text", "text": ""}):
            yield event
    for event in blocks.close():
        yield event
    stop_reason, stop_sequence = ("max_tokens", None) if warm else _stop_reason(final, run.req.params.max_tokens)
    delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    yield _event("message_delta", {"type": "message_delta", "delta": delta, "usage": _usage(final, warm=warm, compacted=compacted),
                                   **({"context_management": context} if context is not None else {})})  # fmt: skip
    yield _event("message_stop", {"type": "message_stop"})


@router.post("/messages/count_tokens")
async def count_tokens(request: Request, body: CountTokensBody) -> dict:
    edits = context_edits.parse(body.context_management)
    req = await asyncio.to_thread(_request, body, None, request.app.state.settings.allow_image_urls)
    if not edits:
        return {"input_tokens": await count_prompt_tokens(request, req)}
    count = await _counter(request, body.model)
    tokens = await count(req)
    edited, _ = await context_edits.apply(req, edits, count)
    after = await count(edited)
    if tokens is None or after is None:  # a remote model: its tokenizer is the provider's
        return {"input_tokens": await count_prompt_tokens(request, edited)}
    return {"input_tokens": after, "context_management": {"original_input_tokens": tokens}}


def _model(m) -> dict:
    created = m.since or datetime.fromtimestamp(0, UTC)
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return {"type": "model", "id": m.name, "display_name": m.name, "created_at": created.isoformat().replace("+00:00", "Z")}


def _remote_model(model_id: str, created: int = 0) -> dict:
    moment = datetime.fromtimestamp(created, UTC).isoformat().replace("+00:00", "Z")
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": moment}


@models_router.get("/models", include_in_schema=False)
async def list_models(request: Request, limit: int = 20, after_id: str | None = None, before_id: str | None = None) -> dict:
    """Anthropic's paged list: ``limit`` (1-1000, 20 by default) models after ``after_id`` or before ``before_id``."""
    if not 1 <= limit <= 1000:
        raise InvalidRequest("'limit' must be from 1 to 1000.", param="limit")
    models = [_model(m) for m in await asyncio.to_thread(request.app.state.manager.available)]
    models += [_remote_model(m.id, m.created) for m in await remote_routes.remote_models(request)]
    ids = [m["id"] for m in models]
    if after_id is not None:
        start = ids.index(after_id) + 1 if after_id in ids else len(ids)
        page, more = models[start : start + limit], start + limit < len(models)
    elif before_id is not None:
        end = ids.index(before_id) if before_id in ids else 0
        page, more = models[max(0, end - limit) : end], end - limit > 0
    else:
        page, more = models[:limit], limit < len(models)
    return {
        "data": page,
        "has_more": more,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }


@models_router.get("/models/{model_id:path}", include_in_schema=False)
async def get_model(request: Request, model_id: str) -> dict:
    found = await targets.resolve(request, model_id)
    if not is_local(found):
        entry = await remote_routes.model_entry(request, found)
        return _remote_model(model_id, entry.get("created", 0))
    return _model(found)


__all__ = ["router", "models_router"]
