"""OpenAI's Responses API on the same port: ``POST /v1/responses`` (plain and streamed), and
``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` from a bounded
in-memory store (:mod:`engine.server.responses_store`) that ``previous_response_id`` continues from.

A request becomes one :class:`GenerationRequest` (see :mod:`engine.server.dialect`); the answer comes
back as output items (``reasoning``, ``message``, ``function_call``). Errors keep OpenAI's shape, as
chat completions answers them.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import Field, StrictBool
from starlette.exceptions import HTTPException

from engine.errors import (
    ContextLengthExceeded,
    ConversationNotFound,
    InvalidRequest,
    Overloaded,
    PreviousResponseNotFound,
    RequestCancelled,
)
from engine.model_defaults import left_unset
from engine.server import compaction, media
from engine.server.answers import AnswerRoute
from engine.server.api_models import KeepAlive, NullAsDefaultBody
from engine.server.conversation_store import ConversationFull, ConversationStore
from engine.server.dialect import DialectRun, context_of, count_prompt_tokens, without_oldest
from engine.server.docs_chat import Grounding, attach, documents_asked
from engine.server.errors import error_info
from engine.server.generation import Generation, streamed
from engine.server.responses_store import ResponseStore, StoredResponse
from engine.server.streaming import KEEPALIVE, KEEPALIVE_SECONDS, ticks
from engine.tools import (
    CustomInputStream,
    ToolCall,
    ToolSpec,
    custom_call,
    custom_input,
    parse_tool_choice,
    parse_tools,
)
from engine.types import (
    MEDIA_MARKER,
    ChatMessage,
    GenerationChunk,
    GenerationRequest,
    MediaInput,
    ResponseFormat,
    SamplingParams,
)
from engine.validation import request_keep_alive

router = APIRouter(prefix="/v1", route_class=AnswerRoute)
log = logging.getLogger(__name__)

_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


class ResponsesBody(NullAsDefaultBody):
    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] | None = ""
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = Field(None, ge=0, le=2)  # OpenAI's range
    top_p: float | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    stream: StrictBool | None = False  # (null: the default, as OpenAI's spec allows for these three)
    store: StrictBool | None = True
    background: StrictBool | None = False
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    # "auto": a conversation longer than the context loses its oldest items (the instructions kept), as OpenAI's does
    truncation: Literal["auto", "disabled"] | None = "disabled"
    user: str | None = None
    speculative: StrictBool | None = None  # an extension, as in chat completions: false turns drafting off
    keep_alive: KeepAlive = None  # an extension, as in chat completions: Ollama's keep_alive
    include: list[str] | None = None  # "message.output_text.logprobs": the answer's tokens with their log-probabilities
    conversation: Any = None  # a conversation's id (/v1/conversations), or {"id": ...}: checked by _conversation_id
    prompt: Any = None  # OpenAI's stored prompts: refused, with a sentence saying why
    top_logprobs: int | None = Field(None, ge=0, le=20)
    # [{"type": "compaction", "compact_threshold": N}]: a conversation past N tokens (or the context) is compacted
    # first, and the compaction item comes first in the output (engine.server.compaction)
    context_management: Any = None


#: Background responses running at once, all clients together: each holds a slot or a place in its model's queue
#: with no client to go away, so more are refused (429) until some end, and the queue keeps room for the others.
MAX_BACKGROUND = 16

#: Characters of a streamed response's events kept for reading it again from an event (about 4,000 tokens' events,
#: fewer with log-probabilities); past them the oldest go, and it can be read again only whole.
EVENTS_KEPT = 4_000_000


class _EventLog:
    """A stream's events as it sends them (keep-alives aside), numbered from 0, the oldest dropped past
    :data:`EVENTS_KEPT` characters."""

    def __init__(self) -> None:
        self._events: collections.deque[bytes] = collections.deque()
        self.first = 0  # the number of the oldest event kept
        self._chars = 0

    def add(self, event: bytes) -> None:
        self._events.append(event)
        self._chars += len(event)
        while self._chars > EVENTS_KEPT and len(self._events) > 1:
            self._chars -= len(self._events.popleft())
            self.first += 1

    def __len__(self) -> int:  # the number the next event will have
        return self.first + len(self._events)

    def __getitem__(self, number: int) -> bytes:
        return self._events[number - self.first]

    def whole(self) -> tuple[bytes, ...] | None:
        """Every event, or None once some were dropped."""
        return tuple(self._events) if self.first == 0 else None


def _keep_events(request: Request, rid: str, sent: _EventLog) -> None:
    """Store a finished streamed response's events with it (it was stored as it finished), or say they were lost."""
    store = _store(request)
    stored = store.get(rid)
    if stored is not None:
        events = sent.whole()
        store.put(rid, stored.with_events(events or (), lost=events is None))


async def _recorded(request: Request, turn: _Turn, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A streamed response's events as they go, then kept with it once it is stored."""
    sent = _EventLog()
    async for event in events:
        if event != KEEPALIVE:
            sent.add(event)
        yield event
    _keep_events(request, turn.rid, sent)


#: What ``include`` may ask for that Hearth gives; the rest (OpenAI's hosted tools' results) is never made here.
LOGPROBS = "message.output_text.logprobs"


_STATE_LOCK = threading.Lock()  # made by whichever thread asks first (_turn runs off the loop)


def _app_state(request: Request, name: str, make: Callable[[], Any]) -> Any:
    """The app's ``name``, made once by ``make``."""
    state = request.app.state
    with _STATE_LOCK:
        if getattr(state, name, None) is None:
            setattr(state, name, make())
        return getattr(state, name)


def _store(request: Request) -> ResponseStore:
    return _app_state(request, "responses", ResponseStore)


def conversations(request: Request) -> ConversationStore:
    """The worker's conversations (/v1/conversations)."""
    return _app_state(request, "conversations", ConversationStore)


def _live(request: Request) -> dict[str, _Live]:
    """The background responses running, by id."""
    return _app_state(request, "live_responses", dict)


def _starting(request: Request) -> set[str]:
    """The background responses taken and not yet running (their model loads, their prompt is queued)."""
    return _app_state(request, "background_starting", set)


def _found(request: Request, rid: str) -> StoredResponse:
    stored = _store(request).get(rid)
    if stored is None:
        raise HTTPException(
            404, f"No stored response has id '{rid}'; responses are kept in memory until the worker restarts (not with store: false)."
        )
    return stored


#: The scope key of a WebSocket connection's own responses (:mod:`engine.server.responses_socket`): those it made with
#: ``store: false``, kept for the connection alone so that its next ``response.create`` continues from them.
SOCKET_RESPONSES = "hearth.socket_responses"


def _kept(request: Request, rid: str) -> StoredResponse | None:
    """The response ``rid`` to continue from: the connection's own (a WebSocket's), else the stored one."""
    own: ResponseStore | None = request.scope.get(SOCKET_RESPONSES)
    found = own.get(rid) if own is not None else None
    return found if found is not None else _store(request).get(rid)


def _keep(request: Request, turn: _Turn, response: dict) -> None:
    """A finished ``response`` and its conversation (``turn.answered``) kept to continue from: in the store with
    ``store: true``, else for its WebSocket connection alone (a plain request's is not kept)."""
    assert turn.answered is not None
    kept: ResponseStore | None = _store(request) if turn.body.store else request.scope.get(SOCKET_RESPONSES)
    if kept is not None:
        kept.put(turn.rid, StoredResponse(response, turn.answered, tuple(turn.input_items)))


_TEXT_PARTS = ("input_text", "output_text", "text", "reasoning_text")


def _content_text(content: Any, where: str, param: str = "input") -> str:
    """The text of an item's ``content`` (or a call output's ``output``), whose path in the request is ``where``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be text or a list of content parts.", param=param)
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise InvalidRequest(f"{where}[{j}].text must be text.", param=param)
            parts.append(part["text"])
        elif kind == "input_image":
            parts.append(MEDIA_MARKER)  # the picture itself: _images
        elif kind in ("input_file", "input_audio"):
            raise InvalidRequest(f"{where}[{j}] is {kind}; Hearth's models here read text only.", param=param)
        elif not isinstance(part, dict):
            raise InvalidRequest(f"{where}[{j}] must be a content part (an object with a type).", param=param)
        elif kind != "refusal":
            raise InvalidRequest(f"{where}[{j}] has type '{kind}', which Hearth does not support.", param=param)
    return "".join(parts)


def _images(content: Any, where: str, allow_remote: bool, param: str = "input") -> tuple[MediaInput, ...]:
    """The ``input_image`` parts' pictures (``image_url``: a data: URL, or http(s) with --allow-image-urls)."""
    out = []
    for j, part in enumerate(content if isinstance(content, list) else ()):
        if isinstance(part, dict) and part.get("type") == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise InvalidRequest(f"{where}[{j}] needs image_url (a data: URL); file_id is not supported.", param=param)
            out.append(media.image_from_url(url, f"{where}[{j}]", allow_remote=allow_remote))
    return tuple(out)


def _input_items(body: ResponsesBody) -> list[dict]:
    if isinstance(body.input, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": body.input}]}] if body.input else []
    return [dict(item) for item in body.input or ()]


_OUTPUTS = ("function_call_output", "custom_tool_call_output")  # what the client's tools gave back


def input_messages(
    items: list[dict], earlier: tuple[ChatMessage, ...], allow_remote: bool = False,
    shown: dict[tuple[str, str], str] | None = None, param: str = "input",
) -> list[ChatMessage]:  # fmt: skip
    """The input items as messages; ``shown``: the name the model sees for a namespaced tool's (namespace, name);
    ``param``: the field the items came in (its name in errors)."""
    out: list[ChatMessage] = []
    names = {c.id: c.name for m in earlier for c in m.tool_calls}  # call ids -> function names
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequest(f"{param}[{i}] must be an item (an object with a type).", param=param)
        kind = item.get("type", "message")
        where = f"{param}[{i}]"
        if "id" in item and not isinstance(item["id"], str):
            raise InvalidRequest(f"{where}.id must be text (an item's id), or left out.", param=param)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise InvalidRequest(f"{where}.role must be user, assistant, system or developer.", param=param)
            content = item.get("content")
            pictures = _images(content, f"{where}.content", allow_remote, param)
            text = _content_text(content, f"{where}.content", param)
            out.append(ChatMessage("system" if role == "developer" else role, text, media=pictures))
        elif kind in ("function_call", "custom_tool_call"):
            name, call_id = item.get("name"), item.get("call_id")
            if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(f"{where} is a {kind} without 'call_id' and 'name'.", param=param)
            if isinstance(item.get("namespace"), str):
                name = (shown or {}).get((item["namespace"], name), name)
            if kind == "custom_tool_call":
                call = custom_call(name, item.get("input"), call_id)
            else:
                args = item.get("arguments") or "{}"
                call = ToolCall(name=name, arguments=args if isinstance(args, str) else json.dumps(args), id=call_id)
            names[call_id] = name
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and i > 0 and items[i - 1].get("type", "message") not in _OUTPUTS:
                out[-1] = ChatMessage("assistant", last.content, tool_calls=(*last.tool_calls, call), reasoning=last.reasoning)
            else:
                out.append(ChatMessage("assistant", "", tool_calls=(call,)))
        elif kind in _OUTPUTS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(f"{where} is a {kind} without 'call_id'.", param=param)
            output = item.get("output", "")
            out.append(ChatMessage("tool", _content_text(output, f"{where}.output", param), tool_call_id=call_id,
                                   name=names.get(call_id), media=_images(output, f"{where}.output", allow_remote, param)))  # fmt: skip
        elif kind == "reasoning":
            continue  # earlier turns' reasoning is not sent back to the model
        elif kind == "compaction":  # the earlier conversation, compacted (engine.server.compaction)
            held = compaction.read(item.get("encrypted_content"), where, param)
            if held.users is not None:  # a server-side item stands for everything before it but the system messages
                out = [m for m in out if m.role == "system"]
            out += held.messages()
        else:
            raise InvalidRequest(f"{where} has type '{kind}', which Hearth does not support.", param=param)
    return out


def with_ids(items: list[dict]) -> list[dict]:
    """Input items as they are stored and listed (in place): each with its id, a message's text as a part and its
    status, as OpenAI's are."""
    for item in items:
        kind = item.setdefault("type", "message")
        item.setdefault("id", _new_id(kind))
        if kind == "message" and isinstance(item.get("content"), str):
            said = item["content"]
            item["content"] = [_text_part(said) if item.get("role") == "assistant" else {"type": "input_text", "text": said}]
        if kind == "function_call" and not isinstance(item.get("arguments"), str):  # JSON text, as OpenAI's are
            item["arguments"] = json.dumps(item.get("arguments") or {})
        if kind != "reasoning":
            item.setdefault("status", "completed")
    return items


def page(items: list[dict], order: str, limit: int, after: str | None, owner: str) -> dict:
    """A page of ``items`` (oldest first) as OpenAI lists them: ``order`` asc or desc, at most ``limit``, after the
    item whose id is ``after``; ``owner`` names what holds them, in errors."""
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be asc or desc.", param="order")
    if not 1 <= limit <= 100:
        raise InvalidRequest("'limit' must be a whole number from 1 to 100.", param="limit")
    if order == "desc":
        items = items[::-1]
    if after is not None:  # the page after the item with this id
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise InvalidRequest(f"'after' names no item of {owner}; give an id from an earlier page.", param="after")
        items = items[ids.index(after) + 1 :]
    data = items[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": len(items) > limit,
    }


def _format(text: dict[str, Any] | None) -> ResponseFormat:
    fmt = (text or {}).get("format") or {"type": "text"}
    if not isinstance(fmt, dict):
        raise InvalidRequest("text.format must be an object with a 'type': text, json_object or json_schema.", param="text.format")
    kind = fmt.get("type")
    if kind == "text":
        return ResponseFormat()
    if kind == "json_object":
        return ResponseFormat(type="json_object")
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest("text.format of type json_schema needs a 'schema' object.", param="text.format")
        return ResponseFormat(type="json_schema", schema=schema)
    raise InvalidRequest("text.format.type must be text, json_object or json_schema.", param="text.format")


def _hosted(tool: Any) -> bool:
    """A tool OpenAI runs (``web_search``, ``file_search``, ``code_interpreter``, ``mcp``, ...), or one with output
    items of its own (``local_shell``, ``apply_patch``): none of them is a tool a local model can be given."""
    return isinstance(tool, dict) and tool.get("type", "function") not in ("function", "namespace", "custom")


def _flat_tools(tools: list[dict[str, Any]] | None) -> tuple[list[Any] | None, dict[str, tuple[str, str]]]:
    """The request's tools, with each ``namespace`` tool's own tools among them (Codex groups its MCP servers' tools
    so) and OpenAI's hosted tools left out (Codex sends ``web_search`` with every request); and where each
    namespaced tool came from: the name the model sees -> (namespace, the tool's name). The model sees a tool by
    its own name, or as ``namespace__name`` where two tools share one.

    Raises:
        InvalidRequest: a namespace without a name or a list of tools.
    """
    if not tools or not any(isinstance(t, dict) and (t.get("type") == "namespace" or _hosted(t)) for t in tools):
        return tools, {}
    flat: list[Any] = []
    grouped: list[tuple[str, Any]] = []
    left_out = [t.get("type") for t in tools if _hosted(t)]
    if left_out:
        log.info("left out tools OpenAI runs, which no local model can: %s", ", ".join(map(str, left_out)))
    for i, tool in enumerate(tools):
        if _hosted(tool):
            continue
        if not (isinstance(tool, dict) and tool.get("type") == "namespace"):
            flat.append(tool)
            continue
        name, members = tool.get("name"), tool.get("tools")
        if not isinstance(name, str) or not name or not isinstance(members, list):
            raise InvalidRequest(f"tools[{i}] is a namespace without a 'name' and a list of 'tools'.", param="tools")
        grouped += [(name, member) for member in members]
    own = lambda t: t.get("name") if isinstance(t, dict) else None  # noqa: E731
    counts = Counter(own(t) for t in [*flat, *(m for _, m in grouped)])
    origin: dict[str, tuple[str, str]] = {}
    for namespace, member in grouped:
        name = own(member)
        if not isinstance(name, str) or not name:
            flat.append(member)  # parse_tools names what is wrong with it
            continue
        shown = name if counts[name] == 1 else f"{namespace}__{name}"
        flat.append({**member, "name": shown})
        origin[shown] = (namespace, name)
    return flat, origin


def _placed(item: dict, origin: dict[str, tuple[str, str]]) -> dict:
    """A ``function_call`` output item named as its tool is in the request: its namespace and own name."""
    found = origin.get(item.get("name", ""))
    if found is not None:
        item["namespace"], item["name"] = found
    return item


def _tool_fields(body: ResponsesBody, flat: list[Any] | None) -> dict[str, Any]:
    """The request's tools (``flat``: as :func:`_flat_tools` gave them), tool choice and thinking switch."""
    tools = parse_tools(flat, custom=True)
    effort = (body.reasoning or {}).get("effort")
    if effort is not None and effort not in _EFFORTS:
        raise InvalidRequest(f"'reasoning.effort' must be one of {', '.join(_EFFORTS)}.", param="reasoning.effort")
    return {
        "tools": tools,
        "tool_choice": parse_tool_choice(body.tool_choice, tools),
        "parallel_tool_calls": body.parallel_tool_calls,
        "thinking": None if effort is None else effort not in ("none", "minimal"),
        "template_kwargs": (("reasoning_effort", effort),) if effort is not None else (),
    }


@dataclass
class _Turn:
    """One request, translated: what to generate and what to echo and store."""

    body: ResponsesBody
    rid: str
    req: GenerationRequest
    history: tuple[ChatMessage, ...]  # the conversation without this request's instructions
    input_items: list[dict]
    created_at: int
    grounding: Grounding | None = None  # the documents the answer is grounded in, once retrieved
    origin: dict[str, tuple[str, str]] = field(default_factory=dict)  # namespaced tools (_flat_tools)
    answered: tuple[ChatMessage, ...] | None = None  # the conversation with the answer, once it is finished
    conversation: str | None = None  # the id of the conversation (/v1/conversations) it reads and adds to
    keep: float | None = None  # the request's keep_alive, for each generation it starts
    compact: bool = False  # context_management turned server-side compaction on
    compact_at: int | None = None  # its threshold in tokens (None: only a conversation that does not fit is compacted)
    summarizing: bool = False  # its first generation is the summary of its conversation (the answer's comes after)
    trigger: bool = False  # a compaction_trigger ended the input: the compaction is the whole output, with no answer
    users_room: int = compaction.MAX_TOKENS  # the tokens of user messages a compaction keeps whole (the newest)
    compacted: dict | None = None  # the compaction output item, once the summary is written
    compaction_final: GenerationChunk | None = None  # the summary's last chunk: its tokens count in the usage


def _turn(request: Request, body: ResponsesBody) -> _Turn:
    if body.background and not body.store:
        raise InvalidRequest("'background': true needs 'store': true, since a background response is read back by its id.",
                             param="background")  # fmt: skip
    earlier: tuple[ChatMessage, ...] = ()
    conversation = _conversation_id(body)
    compact, compact_at = compaction.threshold(body.context_management)
    if body.prompt is not None:
        raise InvalidRequest("Stored prompts ('prompt') live on OpenAI's platform, not here; send their instructions "
                             "and input in the request instead.", param="prompt")  # fmt: skip
    if conversation is not None and body.previous_response_id:
        raise InvalidRequest("'conversation' and 'previous_response_id' cannot be used together; give one of them.",
                             param="conversation")  # fmt: skip
    if conversation is not None:
        kept = conversations(request).items(conversation)
        if kept is None:
            raise ConversationNotFound(conversation)
        earlier = tuple(input_messages(kept, (), request.app.state.settings.allow_image_urls))
    elif body.previous_response_id:
        stored = _kept(request, body.previous_response_id)
        if stored is None and body.previous_response_id in _live(request):
            raise InvalidRequest(f"Response '{body.previous_response_id}' is still being generated in the background; wait "
                                 "until its status is no longer queued or in_progress, then continue from it.",
                                 param="previous_response_id")  # fmt: skip
        if stored is None:
            raise PreviousResponseNotFound(body.previous_response_id)
        earlier = stored.conversation
    items = with_ids(_input_items(body))  # kept as input_items lists them
    trigger = _compaction_trigger(items)
    if compaction.replaces_earlier(items):  # the earlier turns are in the input's compaction item
        earlier = tuple(m for m in earlier if m.role == "system")
    flat, origin = _flat_tools(body.tools)
    shown = {place: name for name, place in origin.items()}
    history = earlier + tuple(input_messages(items, earlier, request.app.state.settings.allow_image_urls, shown))
    if not history:
        raise InvalidRequest("'input' is empty; send some text or input items.", param="input")
    if body.max_output_tokens is not None and body.max_output_tokens < 1:
        raise InvalidRequest("'max_output_tokens' must be at least 1.", param="max_output_tokens")
    params = SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        max_tokens=body.max_output_tokens,
        logprobs=(body.top_logprobs or 0) if LOGPROBS in (body.include or ()) else None,
    )
    req = GenerationRequest(
        model=body.model, messages=_system(body.instructions) + history, params=params, response_format=_format(body.text),
        unset=left_unset({"temperature": body.temperature, "top_p": body.top_p, "max_tokens": body.max_output_tokens}),
        speculative=body.speculative, **_tool_fields(body, flat),
    )  # fmt: skip
    return _Turn(body, f"resp_{uuid.uuid4().hex}", req, history, items, int(time.time()), origin=origin,
                 conversation=conversation, keep=request_keep_alive(body.keep_alive), compact=compact,
                 compact_at=compact_at, trigger=trigger)  # fmt: skip


def _system(instructions: str | None) -> tuple[ChatMessage, ...]:
    """A request's ``instructions`` as its system message (none without them)."""
    return (ChatMessage("system", instructions),) if instructions else ()


def _compaction_trigger(items: list[dict]) -> bool:
    """Whether the input ends with a ``compaction_trigger`` item (taken out of ``items``: the conversation before it
    is compacted now, and the compaction item is the response's whole output, as newer Codex compacts a session).

    Raises:
        InvalidRequest: a trigger that is not the last item.
    """
    at = [i for i, item in enumerate(items) if isinstance(item, dict) and item.get("type") == "compaction_trigger"]
    if not at:
        return False
    if at != [len(items) - 1]:
        raise InvalidRequest(f"input[{at[0]}] is a compaction_trigger, which must be the last input item.", param="input")
    items.pop()
    return True


def _usage(*finals: GenerationChunk | None) -> dict:
    """The tokens of the generations that made a response (a server-side compaction's summary and the answer)."""
    done = [f for f in finals if f is not None]
    read, written = sum(f.prompt_tokens for f in done), sum(f.completion_tokens for f in done)
    return {
        "input_tokens": read,
        "input_tokens_details": {"cached_tokens": sum(f.cached_tokens for f in done), "cache_write_tokens": 0},
        "output_tokens": written,
        "output_tokens_details": {"reasoning_tokens": sum(f.reasoning_tokens for f in done)},
        "total_tokens": read + written,
    }


def _response(turn: _Turn, model: str, *, status: str, output: list[dict], final: GenerationChunk | None) -> dict:
    body = turn.body
    fmt = (body.text or {}).get("format") or {"type": "text"}
    out = {
        "id": turn.rid,
        "object": "response",
        "created_at": turn.created_at,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": turn.req.parallel_tool_calls is not False,  # left out: several calls, as OpenAI's default
        "previous_response_id": body.previous_response_id,
        "conversation": {"id": turn.conversation} if turn.conversation is not None else None,
        "reasoning": {"effort": (body.reasoning or {}).get("effort"), "summary": None},
        "store": body.store,
        "background": body.background,
        "temperature": turn.req.params.temperature,
        "text": {"format": fmt},
        "tool_choice": body.tool_choice or "auto",
        "tools": [dict(t.custom) if t.custom is not None else {"type": "function", "name": t.name, "description": t.description,
                  "parameters": dict(t.parameters), "strict": t.strict} for t in turn.req.tools],  # fmt: skip
        "top_p": turn.req.params.top_p,
        "top_logprobs": body.top_logprobs,
        "truncation": body.truncation,
        "metadata": body.metadata or {},
    }
    if final is not None:
        out["usage"] = _usage(turn.compaction_final, final)
    if body.user is not None:
        out["user"] = body.user
    return attach(out, turn.grounding)


def _text_part(text: str, logprobs: list[dict] | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def _item(kind: str, iid: str, status: str, *, text: str = "", call: ToolCall | None = None, started: bool = True,
          logprobs: list[dict] | None = None) -> dict:  # fmt: skip
    """An output item: ``message``, ``reasoning``, ``function_call`` or ``custom_tool_call`` (``started``: with its
    content part)."""
    if kind == "message":
        content = [_text_part(text, logprobs)] if started else []
        return {"id": iid, "type": "message", "status": status, "role": "assistant", "content": content}
    if kind == "reasoning":
        return {"id": iid, "type": "reasoning", "status": status, "summary": [],
                "content": [{"type": "reasoning_text", "text": text}] if started else []}  # fmt: skip
    call = call or ToolCall(name="")
    if kind == "custom_tool_call":
        return {"id": iid, "type": kind, "status": status, "call_id": call.id, "name": call.name,
                "input": custom_input(call) if started else ""}  # fmt: skip
    return {"id": iid, "type": "function_call", "status": status, "call_id": call.id, "name": call.name,
            "arguments": call.arguments if started else ""}  # fmt: skip


_ID_PREFIXES = {"message": "msg", "reasoning": "rs", "function_call": "fc", "custom_tool_call": "ctc",
                "function_call_output": "fco", "custom_tool_call_output": "ctco"}  # fmt: skip


def _new_id(kind: str) -> str:
    return _ID_PREFIXES.get(kind, "item") + "_" + uuid.uuid4().hex


def _call_kind(call_name: str | None, tools: tuple[ToolSpec, ...]) -> str:
    """The output item a call of the tool ``call_name`` is: a custom tool's call of text, else a function call."""
    return "custom_tool_call" if any(t.name == call_name and t.custom is not None for t in tools) else "function_call"


def _finish(request: Request, turn: _Turn, model: str, output: list[dict], text: str, reasoning: str, final: GenerationChunk) -> dict:
    response = _response(turn, model, status=_status(final), output=output, final=final)
    if turn.conversation is not None and response["status"] != "cancelled":
        _add_to_conversation(request, turn.conversation, [*turn.input_items, *output])
    answer = ChatMessage("assistant", text, tool_calls=tuple(final.tool_calls), reasoning=reasoning or None)
    turn.answered = turn.history + (answer,)
    _keep(request, turn, response)
    return response


def _conversation_id(body: ResponsesBody) -> str | None:
    """The id ``conversation`` gives (a string, or an object with its ``id``), or None."""
    conv = body.conversation
    if conv is None:
        return None
    cid = conv.get("id") if isinstance(conv, dict) else conv
    if not isinstance(cid, str) or not cid:
        raise InvalidRequest("'conversation' must be a conversation's id, or an object with its 'id'.", param="conversation")
    return cid


def _add_to_conversation(request: Request, cid: str, items: list[dict]) -> None:
    """A finished response's input and output items, added to its conversation (unless it went meanwhile)."""
    try:
        if not conversations(request).add(cid, items):
            log.info("conversation %s was deleted while a response to it was generated; its items were not added", cid)
    except ConversationFull:
        log.warning("conversation %s is full; a response's items were not added to it", cid)


class _Live:
    """A response generated in the background (``background: true``) while it runs: its events so far, numbered
    as its stream numbers them. ``GET`` gives the response as it stands, ``GET ?stream=true`` its events and then
    the rest as they come (:meth:`follow`), ``cancel`` ends it. Once it ends it is stored, events included, and
    leaves the worker's list of running ones."""

    def __init__(self, request: Request, run: DialectRun, turn: _Turn, created: dict) -> None:
        self.request = request
        self.run = run
        self.turn = turn
        self.created = created  # the response object as the request's answer gave it (queued)
        self.stream = _Stream(turn.origin, turn.req.tools)
        self.events = _EventLog()
        self.status = "queued"
        self.ended: dict | None = None  # the response once it has ended
        self._changed = asyncio.Event()
        # a task of its own (the client that asked may go away); _ended stores the response however the task ends,
        # even cancelled before it began
        self.task = asyncio.create_task(self._generate(), name=f"background {turn.rid}")
        self.task.add_done_callback(self._ended)

    async def _generate(self) -> None:
        async for event in _events(self.request, self.run, self.turn, self.stream):
            if event != KEEPALIVE:
                if len(self.events):  # past response.created (queued): in progress
                    self.status = "in_progress"
                self.events.add(event)
                self._changed.set()
                self._changed = asyncio.Event()

    def _ended(self, task: asyncio.Task) -> None:
        turn = self.turn
        try:
            self.run.gen.abandon()  # cancelled before it began: its generation was never read
            conversation = turn.answered or turn.history
            if task.cancelled():  # POST .../cancel, DELETE, or the worker stopping
                said = "".join(p.get("text", "") for item in self.snapshot()["output"] if item.get("type") == "message"
                               for p in item.get("content") or ())  # fmt: skip
                self._close_open("incomplete")
                ended = self.snapshot()  # a compaction cut short is left out: its summary was never finished
                output = [x for x in ended["output"] if x.get("type") != "compaction" or x.get("encrypted_content")]
                self.ended = {**ended, "status": "cancelled", "output": output}
                conversation = turn.history + ((ChatMessage("assistant", said),) if said else ())
            elif (exc := task.exception()) is not None:
                log.error("the background response %s failed", turn.rid, exc_info=exc)
                self._close_open("incomplete")
                error = {"code": "server_error", "message": "Generation failed; see the worker log."}
                failed = {**self.snapshot(), "status": "failed", "error": error}
                self.events.add(self.stream.emit("response.failed", response=failed))
                self.ended = failed
            else:  # finished, or failed as its last event says
                self.ended = self.stream.last or {**self.snapshot(), "status": "failed"}
            events = self.events.whole()
            _store(self.request).put(turn.rid, StoredResponse(self.ended, conversation, tuple(turn.input_items), events or (),
                                                              events_lost=events is None))  # fmt: skip
        except Exception:  # the response still ends, and its readers with it
            log.exception("the background response %s could not be stored", turn.rid)
            if self.ended is None:
                self.ended = {**self.created, "status": "failed", "error": {"code": "server_error",
                              "message": "Generation failed; see the worker log."}}  # fmt: skip
        finally:
            _live(self.request).pop(turn.rid, None)
            self._changed.set()

    def _close_open(self, status: str) -> None:
        """The open item's closing events, as a stream cut short ends it."""
        for event in self.stream.close(status):
            self.events.add(event)

    def snapshot(self) -> dict:
        """The response as it stands: its items so far, the open one with its text so far."""
        if self.ended is not None:
            return self.ended
        s = self.stream
        output = [dict(item) for item in s.items]
        if output and s.kind == "message":
            output[-1]["content"] = [_text_part(s.text, s.logprobs)]
        elif output and s.kind == "reasoning":
            output[-1]["content"] = [{"type": "reasoning_text", "text": s.text}]
        return {**self.created, "status": self.status, "output": output}

    async def follow(self, after: int | None = None) -> AsyncIterator[bytes]:
        """The events after sequence number ``after`` (all without it), then each as it comes, until the response
        ends; a keep-alive while none comes. A reader that goes away leaves the response running; one that falls
        behind by more than the events kept goes on from the oldest kept."""
        i = 0 if after is None else max(after + 1, 0)
        while True:
            i = max(i, self.events.first)
            while i < len(self.events):
                yield self.events[i]
                i += 1
            if self.ended is not None:
                return
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield KEEPALIVE

    async def cancel(self) -> dict:
        """End the generation; the response as it ended (cancelled, or finished if it was already)."""
        if not self.task.done():
            self.task.cancel()
            await asyncio.wait({self.task})
        await asyncio.sleep(0)  # (its done callback runs next)
        return self.snapshot()


@router.post("/responses")
async def create_response(request: Request, body: ResponsesBody):
    turn = await asyncio.to_thread(_turn, request, body)  # pictures are read (and fetched) off the event loop
    starting = _starting(request)
    if body.background:
        if len(_live(request)) + len(starting) >= MAX_BACKGROUND:
            raise Overloaded(f"{MAX_BACKGROUND} background responses are already running; wait for one to end, or cancel "
                             "one, and try again.", retry_after=5.0)  # fmt: skip
        starting.add(turn.rid)  # counted from now: requests arriving while this one starts see it
    try:
        run = await _first_started(request, turn)
    finally:
        starting.discard(turn.rid)
    turn.grounding = run.gen.grounding  # its sources come with every response object, response.created's first
    if body.background:
        live = _Live(request, run, turn, _response(turn, run.model_name, status="queued", output=[], final=None))
        _live(request)[turn.rid] = live
        if not body.stream:
            return live.snapshot()
        return StreamingResponse(live.follow(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    if body.stream:
        return streamed(run.gen, _recorded(request, turn, _events(request, run, turn)))
    if turn.summarizing:
        text, reasoning, final = await run.collect()
        model = run.model_name
        if (answer := await _compacted(request, turn, text.strip() or reasoning.strip(), final, model)) is None:
            return _finish_compaction(request, turn, model)
        run = answer
    text, reasoning, final = await run.collect()
    logprobs = [lp.as_openai() for lp in run.text_logprobs]
    output = [_placed(item, turn.origin) for item in _output(text, reasoning, final, logprobs, turn.req.tools)]
    return _finish(request, turn, run.model_name, [*filter(None, [turn.compacted]), *output], text, reasoning, final)


async def socket_events(request: Request, body: ResponsesBody) -> tuple[Generation, AsyncIterator[bytes]]:
    """A response to ``body`` started, and its events as a stream of it sends them, for a WebSocket connection's
    ``response.create`` (:mod:`engine.server.responses_socket`; ``background`` is for it to refuse). The caller gives
    the generation up (:meth:`Generation.abandon`) once it stops reading the events, however it stops.

    Raises:
        HearthError: as ``POST /v1/responses`` answers it before its first event.
    """
    turn = await asyncio.to_thread(_turn, request, body)
    run = await _first_started(request, turn)
    turn.grounding = run.gen.grounding
    events = _events(request, run, turn)
    return run.gen, (_recorded(request, turn, events) if body.store else events)


async def prepared_events(request: Request, body: ResponsesBody) -> AsyncIterator[bytes]:
    """A WebSocket's ``response.create`` with ``generate: false``: the turn kept to continue from, with no answer
    (``response.created``, then ``response.completed`` with no output). Its prompt is read by the model, loaded for it
    if it was not, so that the next turn's prompt, which begins with it, is read from the model's cache.

    Raises:
        HearthError: as ``POST /v1/responses`` answers it.
    """
    turn = await asyncio.to_thread(_turn, request, body)
    turn.req = replace(turn.req, params=replace(turn.req.params, max_tokens=1))
    run = await _started(request, turn, turn.keep)
    _, _, final = await run.collect()
    final = replace(final, completion_tokens=0, reasoning_tokens=0)  # the one token read it, and is not kept
    s = _Stream(turn.origin, turn.req.tools)
    yield s.emit("response.created", response=_response(turn, run.model_name, status="in_progress", output=[], final=None))
    response = _response(turn, run.model_name, status="completed", output=[], final=final)
    if turn.conversation is not None:
        _add_to_conversation(request, turn.conversation, list(turn.input_items))
    turn.answered = turn.history
    _keep(request, turn, response)
    yield s.emit("response.completed", response=response)


async def _first_started(request: Request, turn: _Turn) -> DialectRun:
    """The turn's first generation, started: the answer's, or the summary of its conversation (``turn.summarizing``;
    the answer's generation starts once it is written, :func:`_compacted`) where a compaction_trigger ends the input,
    or where server-side compaction is on (``context_management``) and the conversation is past its threshold or the
    context. Compaction comes before ``truncation``'s cut."""
    if not (turn.trigger or (turn.compact and compaction.compactable(turn.history))):
        return await _started(request, turn, turn.keep)
    # (a remote model's prompt is not counted here: its tokenizer is the provider's, and it is sent as it is)
    tokens, n_ctx = await context_of(request, turn.req, count=turn.compact_at is not None and not turn.trigger)
    longest = compaction.summary_tokens(turn.compact_at, n_ctx)
    turn.users_room = compaction.users_tokens(turn.compact_at, n_ctx)
    if turn.trigger and turn.body.max_output_tokens is not None:  # the compaction is the output max_output_tokens bounds
        longest = min(longest, turn.body.max_output_tokens)
    if not turn.trigger and (tokens is None or turn.compact_at is None or tokens <= turn.compact_at):
        try:
            return await DialectRun(request, turn.req, documents=documents_asked(turn.body), keep_alive=turn.keep).start()
        except ContextLengthExceeded as exc:
            longest = compaction.summary_tokens(turn.compact_at, exc.n_ctx)
            turn.users_room = compaction.users_tokens(turn.compact_at, exc.n_ctx)
    return await _summary_of(request, turn, longest)


async def _summary_of(request: Request, turn: _Turn, longest: int) -> DialectRun:
    """The summary of the turn's conversation, started (``turn.summarizing``)."""
    turn.summarizing = True
    return await compaction.summary_started(request, turn.body.model, _system(turn.body.instructions), turn.history, longest,
                                            turn.keep, like=turn.req)  # fmt: skip


async def _compacted(request: Request, turn: _Turn, summary: str, final: GenerationChunk, model: str,
                     item_id: str | None = None) -> DialectRun | None:  # fmt: skip
    """The turn's conversation replaced by its compaction (its user messages and ``summary``; ``turn.compacted``, the
    output item, with ``item_id`` where its stream has given it one), and the answer's generation started on it;
    None for a compaction_trigger, whose output the item is alone.

    Raises:
        InvalidRequest: the model wrote no summary. ContextLengthExceeded and the rest, as :func:`_started` does.
    """
    if final.finish_reason == "cancelled":  # its client went, or the worker gave it up: nothing is compacted
        raise RequestCancelled()
    if not summary:
        raise InvalidRequest(f"Model '{model}' wrote no summary of the conversation to compact it; try again.",
                             param="input" if turn.trigger else "context_management")  # fmt: skip
    users = compaction.newest_within(compaction.user_texts(turn.history), turn.users_room)
    turn.compacted = {**compaction.item(summary, users), **({"id": item_id} if item_id else {})}
    turn.compaction_final = final
    turn.history = (*(m for m in turn.history if m.role == "system"), *compaction.Compacted(summary, tuple(users)).messages())
    turn.req = replace(turn.req, messages=(*_system(turn.body.instructions), *turn.history))
    turn.summarizing = False
    if turn.trigger:
        return None
    run = await _started(request, turn, turn.keep)
    turn.grounding = run.gen.grounding
    return run


def _finish_compaction(request: Request, turn: _Turn, model: str) -> dict:
    """A compaction_trigger's response, finished: the compaction item its whole output, its usage the summary's;
    stored, it goes on from the compacted conversation."""
    assert turn.compacted is not None and turn.compaction_final is not None
    final, turn.compaction_final = turn.compaction_final, None  # counted once, as the response's own generation
    cut = turn.body.max_output_tokens is not None and final.completion_tokens >= turn.body.max_output_tokens
    response = _response(turn, model, status="incomplete" if cut else "completed", output=[turn.compacted], final=final)
    if turn.conversation is not None:
        _add_to_conversation(request, turn.conversation, [*turn.input_items, turn.compacted])
    turn.answered = turn.history
    _keep(request, turn, response)
    return response


async def _started(request: Request, turn: _Turn, keep: float | None) -> DialectRun:
    """The turn's generation, started; with ``truncation: "auto"``, a conversation too long for the context without
    its oldest items (:func:`without_oldest`), as OpenAI drops them.

    Raises:
        ContextLengthExceeded: the conversation is too long and truncation is disabled, or even its last item is.
    """
    documents = documents_asked(turn.body)
    try:
        return await DialectRun(request, turn.req, documents=documents, keep_alive=keep).start()
    except ContextLengthExceeded as exc:
        if turn.body.truncation != "auto" or len(turn.req.messages or ()) < 2:
            raise
        fitted, fits = await without_oldest(request, turn.req, exc.n_ctx)
        if not fits:
            raise
        log.info("a %d-token conversation lost its %d oldest messages to fit the context", exc.prompt_tokens,
                 len(turn.req.messages or ()) - len(fitted.messages or ()))  # fmt: skip
        turn.req = fitted
        return await DialectRun(request, fitted, documents=documents, keep_alive=keep).start()


def _output(
    text: str, reasoning: str, final: GenerationChunk, logprobs: list[dict] | None = None, tools: tuple[ToolSpec, ...] = ()
) -> list[dict]:
    """A whole answer's output items, as the streamed answer builds them: its thinking, its message (an empty one
    only when the answer is nothing else) with its tokens' ``logprobs`` when asked for, its calls; the last is the
    one a token limit cut."""
    output = [_item("reasoning", _new_id("reasoning"), "completed", text=reasoning)] if reasoning else []
    if text or not (final.tool_calls or reasoning):
        output.append(_item("message", _new_id("message"), "completed", text=text, logprobs=logprobs))
    for c in final.tool_calls:
        kind = _call_kind(c.name, tools)
        output.append(_item(kind, _new_id(kind), "completed", call=c))
    if _status(final) != "completed":
        output[-1]["status"] = "incomplete"
    return output


def _status(final: GenerationChunk) -> str:
    """A finished answer's status: ``incomplete`` when a token limit cut it, ``cancelled`` when the worker gave it
    up (its client went, or the worker is stopping), else ``completed``."""
    return {"length": "incomplete", "cancelled": "cancelled"}.get(str(final.finish_reason), "completed")


_LAST_EVENTS = ("response.completed", "response.incomplete", "response.failed")


class _Stream:
    """The streamed output items, one open at a time, and the events that build them."""

    def __init__(self, origin: dict[str, tuple[str, str]] | None = None, tools: tuple[ToolSpec, ...] = ()) -> None:
        self.origin = origin or {}  # namespaced tools (_flat_tools)
        self.tools = tools
        self.input: CustomInputStream | None = None  # the open custom call's input, decoded from its arguments
        self.seq = 0
        self.items: list[dict] = []  # every item as it stands (the open one last)
        self.kind: str | None = None
        self.text = ""
        self.logprobs: list[dict] = []  # the open message's tokens, when the request asked for them
        self.calls: dict[int, ToolCall] = {}  # tool call index -> the call so far
        self.last: dict | None = None  # the response of the last event (completed, incomplete or failed)

    def emit(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        if kind in _LAST_EVENTS:
            self.last = fields["response"]
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()

    @property
    def index(self) -> int:
        return len(self.items) - 1

    def close(self, status: str = "completed") -> list[bytes]:
        if self.kind is None:
            return []
        item, where = self.items[-1], {"item_id": self.items[-1]["id"], "output_index": self.index}
        out = []
        if self.kind == "message":
            out.append(self.emit("response.output_text.done", **where, content_index=0, text=self.text, logprobs=self.logprobs))
            part = _text_part(self.text, self.logprobs)
            out.append(self.emit("response.content_part.done", **where, content_index=0, part=part))
            item.update(content=[part], status=status)
        elif self.kind == "reasoning":
            out.append(self.emit("response.reasoning_text.done", **where, content_index=0, text=self.text))
            item.update(content=[{"type": "reasoning_text", "text": self.text}], status=status)
        elif self.kind == "custom_tool_call" and self.input is not None:
            whole = custom_input(ToolCall(item["name"], self.input.raw))
            if rest := self.input.rest(whole):
                out.append(self.emit("response.custom_tool_call_input.delta", **where, delta=rest))
            item.update(input=whole, status=status)
            out.append(self.emit("response.custom_tool_call_input.done", **where, input=whole))
        else:
            out.append(self.emit("response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"]))
            item["status"] = status
        out.append(self.emit("response.output_item.done", output_index=self.index, item=item))
        self.kind, self.text, self.logprobs, self.input = None, "", [], None
        return out

    def open(self, kind: str, call: ToolCall | None = None) -> list[bytes]:
        out = self.close()
        item = _placed(_item(kind, _new_id(kind), "in_progress", call=call, started=False), self.origin)
        self.items.append(item)
        self.kind = kind
        out.append(self.emit("response.output_item.added", output_index=self.index, item=dict(item)))
        if kind == "message":
            out.append(self.emit("response.content_part.added", item_id=item["id"], output_index=self.index, content_index=0, part=_text_part("")))
        return out

    def feed(self, chunk: GenerationChunk) -> list[bytes]:
        out: list[bytes] = []
        for kind, piece in (("reasoning", chunk.reasoning), ("message", chunk.text)):
            if not piece:
                continue
            if self.kind != kind:
                out += self.open(kind)
            self.text += piece
            where = {"item_id": self.items[-1]["id"], "output_index": self.index, "content_index": 0}
            if kind == "message":
                logprobs = [lp.as_openai() for lp in chunk.logprobs]
                self.logprobs += logprobs
                out.append(self.emit("response.output_text.delta", **where, delta=piece, logprobs=logprobs))
            else:
                out.append(self.emit("response.reasoning_text.delta", **where, delta=piece))
        for d in chunk.tool_call_deltas:
            if d.id is not None:
                self.calls[d.index] = ToolCall(name=d.name or "", arguments="", id=d.id)
                kind = _call_kind(d.name, self.tools)
                out += self.open(kind, self.calls[d.index])
                self.input = CustomInputStream() if kind == "custom_tool_call" else None
            if d.arguments and self.input is not None and self.kind == "custom_tool_call" and self.items[-1]["call_id"] == self.calls[d.index].id:
                if piece := self.input.feed(d.arguments):  # the item's whole input is set once it is done
                    out.append(self.emit("response.custom_tool_call_input.delta", item_id=self.items[-1]["id"],
                                         output_index=self.index, delta=piece))  # fmt: skip
            elif d.arguments and self.kind == "function_call" and self.items[-1]["call_id"] == self.calls[d.index].id:
                self.items[-1]["arguments"] += d.arguments
                out.append(self.emit("response.function_call_arguments.delta", item_id=self.items[-1]["id"],
                                     output_index=self.index, delta=d.arguments))  # fmt: skip
        return out


async def _events(request: Request, run: DialectRun, turn: _Turn, s: _Stream | None = None) -> AsyncIterator[bytes]:
    s = s or _Stream(turn.origin, turn.req.tools)
    pending = _response(turn, run.model_name, status="in_progress", output=[], final=None)
    # a background response was answered queued, and stays so until its generation gives its first chunk
    queued = bool(turn.body.background)
    yield s.emit("response.created", response={**pending, "status": "queued"} if queued else pending)
    if not queued:
        yield s.emit("response.in_progress", response=pending)
    if turn.summarizing:  # server-side compaction: its item first, then the answer on the compacted conversation
        item = {"id": f"cmp_{uuid.uuid4().hex}", "type": "compaction", "encrypted_content": ""}
        said, thought = [], []
        final = GenerationChunk(finish_reason="stop")
        async for chunk in ticks(run.chunks()):
            if chunk is None:
                yield KEEPALIVE
                continue
            if queued:
                queued = False
                yield s.emit("response.in_progress", response=pending)
            if not s.items:  # the item, once its generation has begun (a background response is in progress then)
                s.items.append(item)
                yield s.emit("response.output_item.added", output_index=s.index, item=dict(item))
            if chunk.finish_reason == "error":
                yield _failed(s, pending, run.failure_message(chunk)[1])
                return
            said.append(chunk.text)
            thought.append(chunk.reasoning)
            if chunk.text or chunk.reasoning:
                yield s.emit("response.compaction.compacting", item_id=item["id"], output_index=s.index)
            if chunk.finish_reason is not None:
                final = chunk
        model = run.model_name
        try:
            answer = await _compacted(request, turn, "".join(said).strip() or "".join(thought).strip(), final, model,
                                      item["id"])  # fmt: skip
        except Exception as exc:  # the response has begun: its failure is its last event
            f = error_info(exc)
            yield _failed(s, pending, f.message, f.code or "server_error")
            return
        try:
            assert turn.compacted is not None
            if not s.items:  # (a generation ends with a chunk: this is only for one that gave none)
                s.items.append(item)
                yield s.emit("response.output_item.added", output_index=s.index, item=dict(item))
            item.update(turn.compacted)
            yield s.emit("response.output_item.done", output_index=s.index, item=dict(item))
            if answer is None:  # a compaction_trigger's: the item is the whole output
                done = _finish_compaction(request, turn, model)
                kind = "response.completed" if done["status"] == "completed" else "response.incomplete"
                yield s.emit(kind, response=done)
                return
            async for event in _answer_events(request, answer, turn, s, pending, queued):
                yield event
        finally:  # started here: given up if its chunks were never read (the client went first)
            if answer is not None:
                answer.gen.abandon()
        return
    async for event in _answer_events(request, run, turn, s, pending, queued):
        yield event


def _failed(s: _Stream, pending: dict, message: str, code: str = "server_error") -> bytes:
    """A stream's last event when its generation fails after the response began."""
    return s.emit("response.failed", response={**pending, "status": "failed", "error": {"code": code, "message": message}})


async def _answer_events(request: Request, run: DialectRun, turn: _Turn, s: _Stream, pending: dict, queued: bool) -> AsyncIterator[bytes]:
    """The answer's events, from its first output item to the last event, which holds the whole response."""
    texts, thoughts = [], []
    final = GenerationChunk(finish_reason="stop")
    async for chunk in ticks(run.chunks()):
        if chunk is None:  # the prompt is still being read
            yield KEEPALIVE
            continue
        if queued:
            queued = False
            yield s.emit("response.in_progress", response=pending)
        if chunk.finish_reason == "error":
            yield _failed(s, pending, run.failure_message(chunk)[1])
            return
        texts.append(chunk.text)
        thoughts.append(chunk.reasoning)
        for event in s.feed(chunk):
            yield event
        if chunk.finish_reason is not None:
            final = chunk
    if not any(item["type"] != "compaction" for item in s.items):  # an empty answer is still one (empty) message
        for event in s.open("message"):
            yield event
    # The closing events (and the last, the whole response) hold the whole answer, with every token's log-probabilities
    # when asked for: written into JSON off the event loop, where the other streams go on meanwhile.
    for event in await asyncio.to_thread(s.close, "completed" if _status(final) == "completed" else "incomplete"):
        yield event
    done = _finish(request, turn, run.model_name, s.items, "".join(texts), "".join(thoughts), final)
    if done["status"] == "cancelled":  # as a cancelled background stream, it ends with its last item
        s.last = done
    else:
        kind = "response.completed" if done["status"] == "completed" else "response.incomplete"
        yield await asyncio.to_thread(s.emit, kind, response=done)


@router.post("/responses/input_tokens")
async def count_input_tokens(request: Request, body: ResponsesBody) -> dict:
    """How many tokens a response's input would take on its model (instructions, earlier turns, tools and
    pictures), rendered as :func:`create_response` renders it; nothing is generated or stored."""
    turn = await asyncio.to_thread(_turn, request, body)
    return {"object": "response.input_tokens", "input_tokens": await count_prompt_tokens(request, turn.req)}


class CompactBody(NullAsDefaultBody):
    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] | None = ""
    instructions: str | None = None
    previous_response_id: str | None = None
    keep_alive: KeepAlive = None  # an extension, as in chat completions: Ollama's keep_alive
    max_output_tokens: int | None = Field(None, ge=1)  # an extension: the summary's longest (compaction.MAX_TOKENS)


@router.post("/responses/compact")
async def compact_conversation(request: Request, body: CompactBody) -> dict:
    """A conversation (``input``, after ``previous_response_id``'s) compacted, as OpenAI's endpoint does it: its user
    messages, then one ``compaction`` item that holds a summary of it, written by the model. The list replaces the
    conversation in the client's next request; there the item reads as the summary. A conversation longer than the
    context is summarised from its newest messages that fit (the instructions kept)."""
    asked = ResponsesBody.model_validate({"model": body.model, "input": body.input, "instructions": body.instructions,
                                          "previous_response_id": body.previous_response_id, "store": False})  # fmt: skip
    turn = await asyncio.to_thread(_turn, request, asked)
    run = await compaction.summary_started(request, body.model, _system(body.instructions), turn.history, body.max_output_tokens or compaction.MAX_TOKENS,
                                 request_keep_alive(body.keep_alive))  # fmt: skip
    text, reasoning, final = await run.collect()
    summary = text.strip() or reasoning.strip()
    if not summary:
        raise InvalidRequest(f"Model '{run.model_name}' wrote no summary of the conversation; try again, or compact "
                             "it with another model.", param="model")  # fmt: skip
    users = [{"type": "message", "id": _new_id("message"), "status": "completed", "role": "user",
              "content": [{"type": "input_text", "text": said}]} for said in compaction.user_texts(turn.history)]  # fmt: skip
    return {"id": f"resp_{uuid.uuid4().hex}", "object": "response.compaction", "created_at": turn.created_at,
            "output": [*users, compaction.item(summary)], "usage": _usage(final)}  # fmt: skip


@router.get("/responses/{rid}", response_model=None)
async def get_response(request: Request, rid: str, stream: bool = False, starting_after: int | None = None) -> dict | Response:
    """A stored response, or a background one as it stands; with ``stream=true`` (the SDK's ``retrieve(id,
    stream=True)`` and ``responses.stream(response_id=...)``) its events as its stream made them, after
    ``starting_after`` when given, and a running one's further events as they come."""
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    live = _live(request).get(rid)
    if live is not None:
        if not stream:
            return live.snapshot()
        if starting_after is not None and starting_after + 1 < live.events.first:
            raise _not_kept(rid, live.events.first)
        return StreamingResponse(live.follow(starting_after), media_type="text/event-stream", headers=headers)
    stored = _found(request, rid)
    if not stream:
        return stored.response
    after = -1 if starting_after is None else max(starting_after, -1)
    if stored.events_lost and after >= 0:
        raise _not_kept(rid, None)
    if stored.events:  # a background response: the very events its stream sent
        body = b"".join(stored.events[after + 1 :])
    else:
        events = [e for e in _replay(stored.response) if e["sequence_number"] > after]
        body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False, separators=(',', ':'))}\n\n".encode() for e in events)
    return Response(body, media_type="text/event-stream", headers=headers)


def _not_kept(rid: str, first: int | None) -> InvalidRequest:
    kept = f"from event {first} on" if first is not None else "only whole"
    return InvalidRequest(f"{rid} streamed more than Hearth keeps to read again ({EVENTS_KEPT:,} characters of events): it "
                          f"can be read {kept}; GET it without stream for the whole response.", param="starting_after")  # fmt: skip


def _replay(response: dict) -> list[dict]:
    """The events of a finished response, numbered as its stream numbered them: created and in progress, each output
    item added, its content in one delta, done, and the response's last event. Every stored response is finished,
    so this is the whole stream."""
    out: list[dict] = []

    def emit(kind: str, **fields: Any) -> None:
        out.append({"type": kind, **fields, "sequence_number": len(out)})

    pending = {**{k: v for k, v in response.items() if k != "usage"}, "status": "in_progress", "output": [],
               "completed_at": None, "incomplete_details": None}  # fmt: skip
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    items: list[dict[str, Any]] = list(response.get("output") or [])
    for index, item in enumerate(items):
        where = {"item_id": item.get("id"), "output_index": index}
        kind = item.get("type")
        if kind == "message":
            part = next(iter(item.get("content") or ()), _text_part(""))
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
            emit("response.content_part.added", **where, content_index=0, part=_text_part(""))
            emit("response.output_text.delta", **where, content_index=0, delta=part.get("text", ""), logprobs=part.get("logprobs", []))
            emit("response.output_text.done", **where, content_index=0, text=part.get("text", ""), logprobs=part.get("logprobs", []))
            emit("response.content_part.done", **where, content_index=0, part=part)
        elif kind == "reasoning":
            parts: list[dict[str, Any]] = list(item.get("content") or [])
            text = "".join(c.get("text", "") for c in parts)
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
            emit("response.reasoning_text.delta", **where, content_index=0, delta=text)
            emit("response.reasoning_text.done", **where, content_index=0, text=text)
        elif kind == "function_call":
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""})
            emit("response.function_call_arguments.delta", **where, delta=item.get("arguments", ""))
            emit("response.function_call_arguments.done", **where, name=item.get("name"), arguments=item.get("arguments", ""))
        elif kind == "custom_tool_call":
            emit("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "input": ""})
            emit("response.custom_tool_call_input.delta", **where, delta=item.get("input", ""))
            emit("response.custom_tool_call_input.done", **where, input=item.get("input", ""))
        elif kind == "compaction":
            emit("response.output_item.added", output_index=index, item={**item, "encrypted_content": ""})
            emit("response.compaction.compacting", **where)
        emit("response.output_item.done", output_index=index, item=item)
    status = response.get("status")
    if status != "cancelled":  # (a cancelled stream ends with its last item)
        last = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(str(status), "response.completed")
        emit(last, response=response)
    return out


@router.post("/responses/{rid}/cancel")
async def cancel_response(request: Request, rid: str) -> dict:
    """Stop a background response: it ends ``cancelled`` with what it had made. One that has ended already is
    given back as it ended."""
    live = _live(request).get(rid)
    if live is not None:
        return await live.cancel()
    response = _found(request, rid).response
    if not response.get("background"):
        raise InvalidRequest(f"Only responses created with background: true can be cancelled, and {rid} was not; "
                             "to stop a streamed answer, close its connection.", param="response_id")  # fmt: skip
    return response


@router.delete("/responses/{rid}")
async def delete_response(request: Request, rid: str) -> dict:
    live = _live(request).get(rid)
    if live is not None:
        await live.cancel()
    _found(request, rid)
    _store(request).delete(rid)
    return {"id": rid, "object": "response", "deleted": True}


@router.get("/responses/{rid}/input_items")
async def input_items(request: Request, rid: str, order: str = "desc", limit: int = 20, after: str | None = None) -> dict:
    live = _live(request).get(rid)
    items = list(live.turn.input_items if live is not None else _found(request, rid).input_items)
    return page(items, order, limit, after, rid)


__all__ = ["router"]
