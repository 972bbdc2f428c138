"""The OpenAI-compatible endpoints: models, chat completions, completions, embeddings."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from engine.errors import ContextLengthExceeded, InvalidRequest
from engine.infill import Infill
from engine.remote.routing import is_local, pass_through
from engine.server import chat_tools, docs_chat, media, remote_routes, targets, tokenize_routes
from engine.server.answers import AnswerRoute
from engine.server.embeddings import check_inputs, embed_for_client, shorten
from engine.server.errors import ERROR_RESPONSES, stream_error_body
from engine.server.generation import Generation, streamed
from engine.server.schemas import (
    ChatCompletionBody,
    ChatMessageBody,
    CompletionBody,
    EmbeddingBody,
    _Sampling,
)
from engine.server.streaming import KEEPALIVE, ticks
from engine.server.structured import requested_format
from engine.tools.spec import new_call_id
from engine.types import (
    MEDIA_MARKER,
    ChatMessage,
    GenerationChunk,
    GenerationRequest,
    MediaInput,
    SamplingParams,
    TokenLogprob,
    as_messages,
)
from engine.validation import request_keep_alive

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, route_class=AnswerRoute)

# With `stream`, a 200 is a stream of server-sent events (OpenAI's chunks, then `data: [DONE]`).
_STREAMED: dict[int | str, dict] = {
    200: {"description": "The completion, or its stream of events.", "content": {"text/event-stream": {}}}
}

FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "tool_calls": "tool_calls"}


def _params(body: _Sampling, *, max_tokens: int | None, logprobs: int | None, index: int = 0) -> SamplingParams:
    seed = body.seed if body.seed is None or index == 0 else body.seed + index
    rep = body.repetition_penalty if body.repetition_penalty is not None else body.repeat_penalty
    return SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k or 0,
        min_p=body.min_p or 0.0,
        repetition_penalty=1.0 if rep is None else rep,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        seed=seed,
        stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
        max_tokens=max_tokens,
        logit_bias=_token_bias(body.logit_bias),
        logprobs=logprobs,
        ignore_eos=bool(body.ignore_eos),
        stop_token_ids=tuple(body.stop_token_ids or ()),
        penalty_last_n=body.repeat_last_n,
        include_stop=bool(body.include_stop_str_in_output),
        min_tokens=body.min_tokens or 0,
    )


def _token_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` keyed by token id numbers (SamplingParams checks the values)."""
    try:
        return tuple((int(k), v) for k, v in (bias or {}).items())
    except ValueError as exc:
        raise InvalidRequest(
            "'logit_bias' must map token ids to numbers between -100 and 100.", param="logit_bias"
        ) from exc


def _check_n(request: Request, n: int | None) -> int:
    """The number of choices asked for (None, as the schema never leaves it, means 1), checked."""
    n = 1 if n is None else n
    limit = request.app.state.settings.max_n
    if not 1 <= n <= limit:
        raise InvalidRequest(f"'n' must be between 1 and {limit}.", param="n")
    return n


def _same(x: Any) -> Any:
    return x


def _legacy_finish(reason: str) -> str:
    """The finish_reason of an answer to OpenAI's deprecated functions: ``function_call`` where it called one."""
    return "function_call" if reason == "tool_calls" else reason


def _finish_reason(final: GenerationChunk | None) -> str:
    """The OpenAI finish_reason of a choice's last chunk."""
    return FINISH.get(final.finish_reason or "stop", "stop") if final is not None else "stop"


# Message parts a local model takes in only with a capability (engine.server.media: a projector that sees
# or hears), by type: the capability, and what the part holds.
_UNREADABLE_PARTS = {"image_url": ("vision", "read images"), "input_audio": ("audio", "hear audio"), "file": ("", "read files")}


def _unreadable_part(messages: list[ChatMessageBody], capabilities: list[str]) -> str | None:
    for m in messages:
        if isinstance(m.content, list):
            for part in m.content:
                kind = part.get("type")
                need, what = _UNREADABLE_PARTS[kind] if isinstance(kind, str) and kind in _UNREADABLE_PARTS else (None, "")
                if need is not None and need not in capabilities:
                    return what
    return None


def _refuse_unreadable(model: str, body: ChatCompletionBody, capabilities: list[str]) -> None:
    """Refuse parts the local ``model`` cannot take in, never drop them: an answer that ignores an
    image reads as if the model had seen it."""
    what = _unreadable_part(body.messages, capabilities)
    if what is not None:
        raise InvalidRequest(f"Model '{model}' cannot {what}; send the message as text only.", param="messages")


def chat_messages(messages: list[ChatMessageBody], *, allow_remote: bool) -> tuple[ChatMessage, ...]:
    """The chat's messages, each ``image_url`` and ``input_audio`` part read (engine.server.media) and put at a
    media marker in the text."""
    items = _message_dicts(messages)
    found: list[list[MediaInput]] = []
    for i, item in enumerate(items):
        own: list[MediaInput] = []
        content = item.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                where, kind = f"messages[{i}].content[{j}]", part.get("type") if isinstance(part, dict) else None
                if kind == "image_url":
                    ref = part.get("image_url")
                    url = ref.get("url") if isinstance(ref, dict) else ref
                    if not isinstance(url, str):
                        raise InvalidRequest(f"{where} needs image_url.url, a data: URL.", param=where)
                    own.append(media.image_from_url(url, where, allow_remote=allow_remote))
                elif kind == "input_audio":
                    audio = given if isinstance(given := part.get("input_audio"), dict) else {}
                    if not isinstance(data := audio.get("data"), str):
                        raise InvalidRequest(f"{where} needs input_audio.data, the file base64-encoded.", param=where)
                    fmt = audio.get("format")
                    if fmt is not None and not isinstance(fmt, str):
                        raise InvalidRequest(f"{where}: input_audio.format must be \"wav\", \"mp3\" or \"flac\".", param=where)
                    own.append(media.audio_from_base64(data, fmt, where))
                else:
                    continue
                content[j] = {"type": "text", "text": MEDIA_MARKER}
        found.append(own)
    return media.with_media(as_messages(items), found)


def _message_dicts(messages: list[ChatMessageBody]) -> list[dict]:
    """The messages as the engine reads them: OpenAI's deprecated ``function_call`` of an assistant message is its
    tool call, and a ``function`` message (that call's result) a tool message answering it."""
    out = []
    called: dict[str, str] = {}  # a function's name -> the id given to its last call
    for m in messages:
        item = m.model_dump()
        call = item.pop("function_call")
        named = isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"]
        if named and item["role"] == "assistant" and not item["tool_calls"]:  # one naming no function: left out
            arguments = call.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
            called[call["name"]] = call_id = new_call_id()
            function = {"name": call["name"], "arguments": arguments}
            item["tool_calls"] = [{"id": call_id, "type": "function", "function": function}]
        if item["role"] == "function":  # OpenAI's deprecated function result is a tool message
            item["role"] = "tool"
            if item["tool_call_id"] is None and item["name"] in called:
                item["tool_call_id"] = called[item["name"]]
        out.append(item)
    return out


def _usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached: int,
    reasoning: int | None = None,
    finals: list[GenerationChunk | None] | None = None,
) -> dict:
    out: dict = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    details: dict = {}
    if reasoning is not None:  # chat: how many of the completion tokens were thinking
        details["reasoning_tokens"] = reasoning
    drafted = sum(f.draft_tokens for f in finals or () if f is not None)
    if reasoning is not None or drafted:  # speculative decoding's drafts, named as OpenAI's Predicted Outputs
        accepted = sum(f.accepted_draft_tokens for f in finals or () if f is not None)
        details["accepted_prediction_tokens"] = accepted
        details["rejected_prediction_tokens"] = drafted - accepted
    if details:
        out["completion_tokens_details"] = details
    return out


def _chat_logprobs(items: list[TokenLogprob]) -> dict:
    return {"content": [lp.as_openai() for lp in items], "refusal": None}


def _completion_logprobs(items: list[TokenLogprob], start_offset: int) -> dict:
    offsets, pos = [], start_offset
    for lp in items:
        offsets.append(pos)
        pos += len(lp.token)
    return {
        "tokens": [lp.token for lp in items],
        "token_logprobs": [lp.logprob for lp in items],
        # a prompt's first token has neither (null), as OpenAI gives it
        "top_logprobs": [{t: v for t, v, _ in lp.top} if lp.logprob is not None else None for lp in items],
        "text_offset": offsets,
    }


def _prompts(prompt: str | list[Any]) -> list[str | tuple[int, ...]]:
    """A completion's prompts: texts, or token ids (one list of them, or several).

    Raises:
        InvalidRequest: the prompt is an empty list, mixes texts and ids, or holds an empty list of ids.
    """
    if isinstance(prompt, str):
        return [prompt]
    given: list[Any] = list(prompt)
    # a whole number as JSON may write it (6370.0 is one, as JSON Schema's integer says)
    whole = lambda p: not isinstance(p, bool) and (isinstance(p, int) or (isinstance(p, float) and p.is_integer()))  # noqa: E731
    if given and all(isinstance(p, str) for p in given):
        return given
    if given and all(whole(p) for p in given):
        return [tuple(int(t) for t in given)]
    if given and all(isinstance(p, list) and p and all(whole(t) for t in p) for p in given):
        return [tuple(int(t) for t in p) for p in given]
    raise InvalidRequest("'prompt' must be a text, a list of texts, a list of token ids or a list of such lists, none of them empty.",
                         param="prompt")  # fmt: skip


def _sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


_MARK = "\ue000hearth-text\ue000"  # a private-use sentinel: no payload but the template's holds it


class _TextEvents:
    """The event of a streamed piece of text, the same bytes as ``_sse(shape(index, text))`` but with only the
    text encoded per event: the rest of each choice's event is encoded once (hundreds of streams each send
    one event a token)."""

    def __init__(self, shape) -> None:
        self.shape = shape
        self._parts: dict[int, tuple[bytes, bytes]] = {}

    def __call__(self, index: int, text: str) -> bytes:
        parts = self._parts.get(index)
        if parts is None:
            head, tail = _sse(self.shape(index, _MARK)).split(json.dumps(_MARK, ensure_ascii=False).encode())
            parts = self._parts[index] = (head, tail)
        return parts[0] + json.dumps(text, ensure_ascii=False).encode() + parts[1]


async def _collect(gen: Generation, n_choices: int, *, answer: bool = True):
    """Every choice's text, log-probabilities and last chunk; without ``answer``, only the prompt's scores
    (completions' echo with ``max_tokens`` 0)."""
    texts = [""] * n_choices
    logprobs: list[list[TokenLogprob]] = [[] for _ in range(n_choices)]
    finals: list[GenerationChunk | None] = [None] * n_choices
    async for index, chunk in gen.chunks(watch_client=True):
        logprobs[index].extend(chunk.prompt_logprobs)  # the prompt's (echo with logprobs) lead the answer's
        if chunk.finish_reason is not None:
            finals[index] = chunk
        if not answer:
            continue
        texts[index] += chunk.text
        if chunk.reasoning:
            gen.reasoning[index] = gen.reasoning.get(index, "") + chunk.reasoning
        logprobs[index].extend(chunk.logprobs)
    for index, f in enumerate(finals):
        if f is not None and f.finish_reason == "error":
            raise gen.failure(index, f)
    return texts, logprobs, finals


def _totals(finals: list[GenerationChunk | None]) -> tuple[int, int, int]:
    done = [f for f in finals if f is not None]
    prompt = done[0].prompt_tokens if done else 0
    cached = done[0].cached_tokens if done else 0
    return prompt, sum(f.completion_tokens for f in done), cached


def _prompt_totals(finals: list[GenerationChunk | None], n: int) -> tuple[int, int]:
    """(prompt tokens, of them read from the cache) of a completion's prompts, each counted once (not per choice)."""
    firsts = [f for i, f in enumerate(finals) if f is not None and i % n == 0]
    return sum(f.prompt_tokens for f in firsts), sum(f.cached_tokens for f in firsts)


@router.get("/models")
async def list_models(request: Request) -> dict:
    manager = request.app.state.manager
    models = await asyncio.to_thread(manager.available)
    remote = await remote_routes.remote_models(request)
    return {"object": "list", "data": [_model_entry(m) for m in models] + [m.to_openai() for m in remote]}


def _model_entry(m) -> dict:
    """A local model as OpenAI's models list and retrieve give it."""
    return {
        "id": m.name,
        "object": "model",
        "created": int(m.since.timestamp()) if m.since else 0,
        "owned_by": (m.repo.split("/")[0] if m.repo else "local"),
        "capabilities": media.capabilities(m.mmproj),  # "vision", "audio": what it takes besides text
    }


@router.get("/models/{model_id:path}")
async def get_model(request: Request, model_id: str) -> dict:
    m = await targets.resolve(request, model_id)
    if not is_local(m):
        return await remote_routes.model_entry(request, m)
    return _model_entry(m)


@router.post("/chat/completions", responses=_STREAMED)
async def chat_completions(request: Request, body: ChatCompletionBody):
    target = await targets.resolve(request, body.model)
    documents = docs_chat.documents_asked(body)
    provider = pass_through(target, own_shape=documents is None)  # OpenAI's own shape: passed as it is
    if provider is not None:
        return await remote_routes.forward(request, provider, "/chat/completions", bool(body.stream))
    n = _check_n(request, body.n)
    local = is_local(target)
    _refuse_unreadable(target.name, body, media.capabilities(target.mmproj) if local else ["vision", "audio"])  # a provider decides
    allow_remote = request.app.state.settings.allow_image_urls
    messages = await asyncio.to_thread(chat_messages, body.messages, allow_remote=allow_remote)
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    fmt = requested_format(body)
    tool_fields = chat_tools.request_fields(body)
    forced = tool_fields["tool_choice"].mode in ("required", "function") and tool_fields["tools"]
    if fmt.type == "grammar" and forced:  # the call's own grammar holds the answer: the request's would be left
        raise InvalidRequest(f"'{fmt.param}' cannot hold an answer whose tool call 'tool_choice' forces; drop one.",
                             param=fmt.param)  # fmt: skip
    group = uuid.uuid4().hex  # the choices are scheduled as one request against others
    reqs = [
        GenerationRequest(
            model=body.model,
            messages=messages,
            params=replace(_params(body, max_tokens=max_tokens, logprobs=logprobs, index=i),
                           thinking_budget=body.thinking_budget),
            unset=body.unset_sampling(max_tokens),
            response_format=fmt,
            speculative=body.speculative,
            prediction=body.prediction.text() if body.prediction is not None else None,
            group=group,
            **tool_fields,
        )
        for i in range(n)
    ]
    keep = request_keep_alive(body.keep_alive)
    gen = Generation(request, body.model, reqs, target=target, documents=documents, keep_alive=keep, n=n)
    await gen.start()
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return streamed(gen, _chat_events(gen, cid, n, include_usage, legacy=body.legacy_functions))
    texts, lps, finals = await _collect(gen, n)
    prompt, completion, cached = _totals(finals)
    message, finish = (chat_tools.legacy_message, _legacy_finish) if body.legacy_functions else (_same, _same)
    tools = gen.requests[0].tools
    answer = {
        "id": cid,
        "object": "chat.completion",
        "created": gen.created,
        "model": gen.served_name,
        "system_fingerprint": gen.fingerprint,
        "choices": [
            {
                "index": i,
                "message": message(chat_tools.message(texts[i], gen.reasoning.get(i, ""), finals[i], tools)),
                "logprobs": _chat_logprobs(lps[i]) if logprobs is not None else None,
                "finish_reason": finish(_finish_reason(finals[i])),
            }
            for i in range(n)
        ],
        "usage": _usage(prompt, completion, cached, chat_tools.reasoning_tokens(finals), finals),
    }
    return docs_chat.attach(answer, gen.grounding)


async def _chat_events(
    gen: Generation, cid: str, n: int, include_usage: bool, *, legacy: bool = False
) -> AsyncIterator[bytes]:
    """A chat completion's chunks; ``legacy``: a call in the deprecated functions' shape (``function_call``)."""
    base = {"id": cid, "object": "chat.completion.chunk", "created": gen.created, "model": gen.served_name}
    base["system_fingerprint"] = gen.fingerprint
    if include_usage:
        base["usage"] = None

    def event(
        index: int, delta: dict, finish: str | None = None, logprobs: dict | None = None, extra: dict | None = None
    ) -> bytes:
        choice = {"index": index, "delta": delta, "finish_reason": finish}
        if logprobs is not None:  # OpenAI's stream schema has no null here: left out when there are none
            choice["logprobs"] = logprobs
        return _sse({**base, "choices": [choice], **(extra or {})})

    text_event = _TextEvents(lambda index, text: {**base, "choices": [{"index": index, "delta": {"content": text}, "finish_reason": None}]})
    # An answer that must be a call opens with no content, as OpenAI's does (the AI SDK opens a text part on "").
    choice = gen.requests[0].tool_choice
    opening = None if gen.requests[0].tools and choice is not None and choice.forced else ""
    for i in range(n):  # the first chunk carries a grounded answer's sources, before any text
        yield event(i, {"role": "assistant", "content": opening}, extra=docs_chat.attach({}, gen.grounding) if i == 0 else None)
    finals: list[GenerationChunk | None] = [None] * n
    calls = [chat_tools.CallDeltas(gen.requests[0].tools) for i in range(n)]
    async for item in ticks(gen.chunks()):
        if item is None:  # the prompt is still being read
            yield KEEPALIVE
            continue
        index, chunk = item
        if chunk.finish_reason == "error":
            yield _sse(stream_error_body(gen.failure(index, chunk)))
            finals[index] = chunk
            continue
        lp = _chat_logprobs(list(chunk.logprobs)) if chunk.logprobs else None
        thought = chat_tools.reasoning_delta(chunk)
        if thought is not None:
            yield event(index, thought)
        if lp:
            yield event(index, {"content": chunk.text}, logprobs=lp)
        elif chunk.text:
            yield text_event(index, chunk.text)
        for delta in calls[index].deltas(chunk):
            if legacy and (delta := chat_tools.legacy_delta(delta)) is None:
                continue
            yield event(index, delta)
        if chunk.finish_reason is not None:
            finals[index] = chunk
            reason = FINISH.get(chunk.finish_reason, "stop")
            yield event(index, {}, _legacy_finish(reason) if legacy else reason)
    if include_usage:
        prompt, completion, cached = _totals(finals)
        usage = _usage(prompt, completion, cached, chat_tools.reasoning_tokens(finals), finals)
        yield _sse({**base, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


@router.post("/completions", responses=_STREAMED)
async def completions(request: Request, body: CompletionBody):
    target = await targets.resolve(request, body.model)
    if (provider := pass_through(target, own_shape=True)) is not None:
        return await remote_routes.forward(request, provider, "/completions", bool(body.stream))
    n = _check_n(request, body.n)
    if body.prompt is None:  # OpenAI's default: generate from the start of a document
        body.prompt = ""
    prompts = _prompts(body.prompt)
    if body.logprobs is not None and not 0 <= body.logprobs <= 20:
        raise InvalidRequest("'logprobs' must be a whole number from 0 to 20.", param="logprobs")
    if body.max_tokens == 0 and not body.echo:
        raise InvalidRequest("'max_tokens' must be at least 1; 0 is only for 'echo', to return (and score) the prompt alone.",
                             param="max_tokens")  # fmt: skip
    if body.suffix and body.echo:
        raise InvalidRequest("'echo' cannot go with 'suffix': the answer goes between the prompt and the suffix; drop one.",
                             param="echo")  # fmt: skip
    if body.suffix and not all(isinstance(p, str) for p in prompts):
        raise InvalidRequest("'suffix' fills in between text and text; give 'prompt' as text, not token ids.",
                             param="suffix")  # fmt: skip
    fmt = requested_format(body)
    group = uuid.uuid4().hex  # every prompt's choices, scheduled as one request against others
    # echo with logprobs: the prompt's own tokens come first, each with its log-probability, as OpenAI gives them
    scored = body.logprobs if body.echo else None
    # echo with max_tokens 0: the prompt alone (its scores read from one step, whose token is not given)
    prompt_only = body.max_tokens == 0
    reqs = [
        GenerationRequest(
            model=body.model,
            prompt="" if body.suffix else p if isinstance(p, str) else "",
            prompt_ids=None if isinstance(p, str) else p,
            # a suffix: the code model fills in between the prompt and it (engine.infill)
            infill=Infill(p, body.suffix) if body.suffix and isinstance(p, str) else None,
            params=replace(_params(body, max_tokens=1 if prompt_only else body.max_tokens if body.max_tokens is not None else 16,
                                   logprobs=body.logprobs, index=j), prompt_logprobs=scored),  # fmt: skip
            unset=body.unset_sampling(body.max_tokens),
            response_format=fmt,
            speculative=body.speculative,
            group=group,
        )
        for p in prompts
        for j in range(n)
    ]
    gen = Generation(request, body.model, reqs, target=target, keep_alive=request_keep_alive(body.keep_alive), n=n)
    await gen.start()
    if body.echo:  # a prompt of token ids echoes as their text
        texts = [p for p in prompts if isinstance(p, str)]
        if len(texts) < len(prompts):
            codec = tokenize_routes.codec_of(gen.lm)
            texts = [p if isinstance(p, str) else b"".join(await asyncio.to_thread(codec.token_bytes, p)).decode(
                "utf-8", errors="replace") for p in prompts]  # fmt: skip
        sources = texts
    else:
        sources = [""] * len(prompts)
    cid = f"cmpl-{uuid.uuid4().hex}"
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return streamed(gen, _completion_events(gen, cid, body, sources, include_usage, n=n, prompt_only=prompt_only))
    texts, lps, finals = await _collect(gen, len(reqs), answer=not prompt_only)
    prompt_total, cached_total = _prompt_totals(finals, n)
    completion_total = 0 if prompt_only else sum(f.completion_tokens for f in finals if f)
    choices = []
    for i, text in enumerate(texts):
        source = sources[i // n]
        choices.append(
            {
                "index": i,
                "text": source + text,
                # with echo the prompt's tokens lead the list, from the text's start
                "logprobs": _completion_logprobs(lps[i], 0) if body.logprobs is not None else None,
                "finish_reason": "length" if prompt_only else _finish_reason(finals[i]),
            }
        )
    return {
        "id": cid,
        "object": "text_completion",
        "created": gen.created,
        "model": gen.served_name,
        "system_fingerprint": gen.fingerprint,
        "choices": choices,
        "usage": _usage(prompt_total, completion_total, cached_total, finals=finals),
    }


async def _completion_events(
    gen: Generation, cid: str, body: CompletionBody, sources: list[str], include_usage: bool, *, n: int,
    prompt_only: bool = False,
):  # fmt: skip
    """The streamed completion: with ``echo`` each choice's prompt text first (``sources``), with the prompt's
    tokens and their log-probabilities when ``logprobs`` is asked for (they come with the choice's first chunk);
    ``prompt_only`` (``max_tokens`` 0) leaves the answer's token out."""
    base = {"id": cid, "object": "text_completion", "created": gen.created, "model": gen.served_name}
    base["system_fingerprint"] = gen.fingerprint
    finals: list[GenerationChunk | None] = [None] * len(gen.requests)
    offsets = [0] * len(gen.requests)
    echo_due = [False] * len(gen.requests)
    if body.echo:
        for i in range(len(gen.requests)):
            offsets[i] = len(sources[i // n])
            if body.logprobs is None:
                yield _sse({**base, "choices": [{"index": i, "text": sources[i // n], "logprobs": None, "finish_reason": None}]})
            else:
                echo_due[i] = True
    text_event = _TextEvents(lambda index, text: {**base, "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": None}]})
    async for item in ticks(gen.chunks()):
        if item is None:  # the prompt is still being read
            yield KEEPALIVE
            continue
        index, chunk = item
        if echo_due[index] and chunk.finish_reason != "error":
            echo_due[index] = False
            lp = _completion_logprobs(list(chunk.prompt_logprobs), 0)
            yield _sse({**base, "choices": [{"index": index, "text": sources[index // n], "logprobs": lp, "finish_reason": None}]})
        if chunk.finish_reason == "error":
            yield _sse(stream_error_body(gen.failure(index, chunk)))
            finals[index] = chunk
            continue
        if prompt_only:
            if chunk.finish_reason is not None:
                finals[index] = chunk
                yield _sse({**base, "choices": [{"index": index, "text": "", "logprobs": None, "finish_reason": "length"}]})
            continue
        if body.logprobs is None and chunk.finish_reason is None:  # a piece of text: the common event
            if chunk.text:
                yield text_event(index, chunk.text)
            continue
        lp = _completion_logprobs(list(chunk.logprobs), offsets[index]) if body.logprobs is not None else None
        offsets[index] += len(chunk.text)
        finish = FINISH.get(chunk.finish_reason, "stop") if chunk.finish_reason else None
        if chunk.text or finish or chunk.logprobs:
            yield _sse({**base, "choices": [{"index": index, "text": chunk.text, "logprobs": lp, "finish_reason": finish}]})
        if chunk.finish_reason is not None:
            finals[index] = chunk
    if include_usage:
        completion = 0 if prompt_only else _totals(finals)[1]
        prompt, cached = _prompt_totals(finals, n)
        yield _sse({**base, "choices": [], "usage": _usage(prompt, completion, cached, finals=finals)})
    yield b"data: [DONE]\n\n"


@router.post("/embeddings")
async def embeddings(request: Request, body: EmbeddingBody):
    target = await targets.resolve(request, body.model)
    if (provider := pass_through(target, own_shape=True)) is not None:
        return await remote_routes.forward(request, provider, "/embeddings", False)
    given = [body.input] if isinstance(body.input, str) else list(body.input)
    texts = [t for t in given if isinstance(t, str) and t]
    if not texts or len(texts) != len(given):
        ids = bool(given) and all(isinstance(t, int) or (isinstance(t, list) and t) for t in given)
        raise InvalidRequest(
            "'input' must be a non-empty text or a list of non-empty texts"
            + ("; token ids (another tokenizer's, as LangChain's OpenAIEmbeddings sends by default) are not taken: send "
               "the texts (with LangChain, check_embedding_ctx_length=False)." if ids else "."),
            param="input",
        )  # fmt: skip
    check_inputs(texts)
    manager = request.app.state.manager
    lm = await asyncio.to_thread(manager.acquire, target.name)
    try:
        vectors, n_tokens = await embed_for_client(request, lm, texts)
    except ContextLengthExceeded as exc:
        raise ContextLengthExceeded(
            exc.prompt_tokens, exc.n_ctx, param="input",
            message=f"An input is {exc.prompt_tokens} tokens but model '{lm.model.name}' takes at most {exc.n_ctx}; "
            "shorten it or split it into several inputs.",
        ) from exc  # fmt: skip
    finally:
        manager.release(lm)
    vectors = [shorten(v, body.dimensions, lm.model.name) for v in vectors]  # `dimensions`: Matryoshka's cut
    data = []
    for i, vec in enumerate(vectors):
        value = (
            base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            if body.encoding_format == "base64"
            else vec
        )
        data.append({"object": "embedding", "index": i, "embedding": value})
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": lm.model.name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }
    )
