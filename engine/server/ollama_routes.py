"""Ollama's API on the same port (and on ``hearth serve --ollama-port``, usually 11434):
``/api/chat``, ``/api/generate``, ``/api/embed``, ``/api/embeddings`` here; the model endpoints
(``tags``, ``show``, ``ps``, ``pull``, ``delete``, ``version``) in :mod:`engine.server.ollama_models`.

For Open WebUI, VS Code's Copilot Chat "Ollama" provider, Page Assist, Continue's and Aider's Ollama
providers and the ``ollama`` libraries. Streams are NDJSON (one JSON object a line) ending with a
``done: true`` line that carries Ollama's counts and durations (nanoseconds).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field, StrictBool, StrictFloat

from engine.errors import ContextLengthExceeded, InvalidRequest, ModelNotFound
from engine.infill import Infill
from engine.model_defaults import left_unset
from engine.remote.routing import is_local, local_spelling
from engine.server import media, targets
from engine.server.api_models import NullLeftOutBody
from engine.server.dialect import (
    DialectRun,
    count_prompt_tokens,
    error_route,
    ollama_error,
    prompt_room,
    without_oldest,
)
from engine.server.docs_chat import DocumentsAsked, documents_asked
from engine.server.embeddings import check_inputs, embed_for_client, shorten
from engine.server.generation import streamed
from engine.server.ollama_load import apply_load_options, check_keep_alive, set_keep_alive
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

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api", route_class=error_route(ollama_error, json_body=True))

NDJSON = "application/x-ndjson"
#: Ollama's repeat_last_n: the penalties read the last 64 tokens of prompt and answer.
REPEAT_LAST_N = 64
_OPTIONS = {  # Ollama's option -> SamplingParams field
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "stop": "stop",
    "repeat_penalty": "repetition_penalty",
    "repeat_last_n": "penalty_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
# Sampling fields some clients send beside ``options`` (the AI SDK's Ollama provider sends ``temperature``,
# ``top_p`` and ``max_output_tokens`` there; Ollama ignores them): used where ``options`` leaves them out.
_LOOSE_OPTIONS = {name: name for name in ("temperature", "top_p", "top_k", "seed", "stop", "presence_penalty",
                                          "frequency_penalty")} | {"max_output_tokens": "num_predict",
                                                                   "max_tokens": "num_predict"}  # fmt: skip
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
# The most token ids /api/generate's ``context`` takes (more than any model's context holds).
MAX_CONTEXT_IDS = 1 << 21
# A keep_alive longer than this (ten years) is forever: the expiry of a longer one overflows a date.
KEEP_ALIVE_FOREVER_AFTER = 10 * 365 * 86_400.0
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class _Generate(NullLeftOutBody):
    model: str = Field(min_length=1)
    format: str | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    stream: StrictBool = True
    keep_alive: StrictFloat | str | None = None  # true is no duration
    think: bool | str | None = None
    speculative: StrictBool | None = None  # an extension, as in chat completions: false turns drafting off
    logprobs: StrictBool = False  # each line's tokens with their log-probabilities (Ollama 0.12.11's)
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def sampling_options(self) -> dict[str, Any] | None:
        """``options``, with the sampling fields sent beside it (:data:`_LOOSE_OPTIONS`) where it leaves them out."""
        extra = self.model_extra or {}
        loose = {option: extra[name] for name, option in _LOOSE_OPTIONS.items() if extra.get(name) is not None}
        if not loose or not isinstance(self.options, dict | None):
            return self.options
        return {**loose, **{k: v for k, v in (self.options or {}).items() if v is not None}}

    def sampling(self) -> SamplingParams:
        """:func:`params` from :meth:`sampling_options`, with the log-probabilities asked for."""
        try:
            sampling = params(self.sampling_options())
        except InvalidRequest as exc:  # a field sent beside options, not in them: named as sent
            option = (exc.param or "").removeprefix("options.")
            given = self.model_extra or {}
            beside = next((n for n, o in _LOOSE_OPTIONS.items() if o == option and given.get(n) is not None), None)
            if beside is None or option in (self.options if isinstance(self.options, dict) else {}):
                raise
            raise InvalidRequest(str(exc).replace(f"'options.{option}'", f"'{beside}'", 1), param=beside) from None
        return replace(sampling, logprobs=(self.top_logprobs or 0) if self.logprobs else None)


class ChatBody(_Generate):
    messages: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] | None = None
    # Not Ollama's (its model decides): OpenAI's, which the AI SDK's Ollama provider sends to force a call
    tool_choice: str | dict[str, Any] | None = None
    # Ollama's: a conversation longer than the context leaves out its oldest messages, and a last message longer
    # than the context its beginning (false: a 400 instead)
    truncate: StrictBool = True


class GenerateBody(_Generate):
    prompt: str = ""
    system: str | None = None
    raw: StrictBool = False
    suffix: str | None = None
    template: str | None = None
    # the ids of the exchange a response gave, continued by this prompt (a chat's prompt only: not raw, no suffix)
    context: list[int] | None = Field(default=None, max_length=MAX_CONTEXT_IDS)
    images: list[str] | None = None
    truncate: StrictBool = True  # Ollama's: a prompt longer than the context loses its beginning (false: a 400)


class EmbedBody(NullLeftOutBody):
    model: str = Field(min_length=1)
    input: str | list[str]
    truncate: StrictBool = True
    options: dict[str, Any] | None = None
    keep_alive: StrictFloat | str | None = None  # true is no duration
    dimensions: int | None = None


class EmbeddingsBody(NullLeftOutBody):
    model: str = Field(min_length=1)
    prompt: str
    options: dict[str, Any] | None = None
    keep_alive: StrictFloat | str | None = None  # true is no duration


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def keep_alive_seconds(value: float | str | None) -> float | None:
    """Ollama's ``keep_alive`` in seconds: a number of seconds or a Go duration ("5m", "1h30m", "-1m");
    negative, or longer than :data:`KEEP_ALIVE_FOREVER_AFTER`, means forever (-1 here); None leaves the
    server's idle TTL.

    Raises:
        InvalidRequest: the value is neither, or not a finite number (NaN, infinity).
    """
    if value is None:
        return None
    if isinstance(value, str):
        seconds = _duration_seconds(value)
    else:
        seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidRequest(
            f"'keep_alive' must be a finite number of seconds or a duration like '5m' (-1 keeps the model loaded), "
            f"got '{_shown(value)}'.",
            param="keep_alive",
        )
    if seconds < 0 or seconds > KEEP_ALIVE_FOREVER_AFTER:
        return -1.0
    return seconds


def _shown(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _duration_seconds(value: str) -> float:
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    parts = _DURATION.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        raise InvalidRequest(
            f"'keep_alive' must be seconds or a duration like '5m', got '{_shown(value)}'.", param="keep_alive"
        )
    return sign * sum(float(n) * _UNIT[u] for n, u in parts)


async def resolve(request: Request, name: str):
    """The local model an Ollama client means: Hearth's name, with ``:latest`` or ``hf.co/`` tolerated.

    Raises:
        ModelNotFound: no local model has that name.
    """
    manager = request.app.state.manager
    try:
        return await asyncio.to_thread(manager.resolve, name)
    except ModelNotFound:
        short = local_spelling(name)
        if short == name:
            raise
        return await asyncio.to_thread(manager.resolve, short)


async def target(request: Request, name: str) -> targets.Target:
    """The model an Ollama chat or generation means: a local one (as :func:`resolve` finds it), else a
    remote provider's ``provider/model``.

    Raises:
        ModelNotFound: neither.
    """
    return await targets.resolve(request, name)  # (which reads Ollama's spellings of a local name in every dialect)


def params(options: dict[str, Any] | None) -> SamplingParams:
    """Sampling from Ollama's ``options``; the ones Hearth does not use are listed in docs/api.md."""
    o = options or {}
    if not isinstance(o, dict):
        raise InvalidRequest("'options' must be an object.", param="options")
    kwargs: dict[str, Any] = {field: o[name] for name, field in _OPTIONS.items() if o.get(name) is not None}
    n = o.get("num_predict")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool)):
        raise InvalidRequest("'num_predict' must be a whole number (-1: no limit).", param="options.num_predict")
    if n is not None and n > 0:
        kwargs["max_tokens"] = n
    kwargs.setdefault("penalty_last_n", REPEAT_LAST_N)  # a Modelfile's repeat_last_n still fills it (unset)
    try:
        return SamplingParams(**kwargs)
    except InvalidRequest as exc:  # named as the client sent it: 'options.repeat_penalty', not the field it fills
        field = exc.param or ""
        name = next((k for k, v in _OPTIONS.items() if field in (k, v)), None)
        if name is None:
            raise
        message = str(exc).replace(f"'{field}'", f"'options.{name}'", 1)
        raise InvalidRequest(message, param=f"options.{name}") from None


def unset(options: dict[str, Any] | None) -> frozenset[str]:
    """The sampling fields ``options`` leave out, which the model's Modelfile PARAMETERs fill (engine.model_defaults)."""
    o = options if isinstance(options, dict) else {}
    return left_unset({field: o.get(name) for name, field in (*_OPTIONS.items(), ("num_predict", "max_tokens"))})


def response_format(fmt: str | dict[str, Any] | None) -> ResponseFormat:
    """Ollama's ``format`` (as `hearth chat --format` takes it too): ``json``, or a JSON schema the answer follows."""
    if fmt in (None, ""):
        return ResponseFormat()
    if fmt == "json":
        return ResponseFormat(type="json_object", param="format")
    if isinstance(fmt, dict):
        return ResponseFormat(type="json_schema", schema=fmt, param="format")
    raise InvalidRequest("'format' must be \"json\" or a JSON schema object.", param="format")


def _images(images: Any, where: str) -> tuple[MediaInput, ...]:
    """Ollama's ``images``: a list of base64-encoded pictures."""
    if not isinstance(images, list) or not all(isinstance(x, str) for x in images):
        raise InvalidRequest(f"{where} must be a list of base64-encoded images.", param=where)
    return tuple(media.image_from_base64(data, f"{where}[{k}]") for k, data in enumerate(images))


def _chat_messages(items: list[dict[str, Any]]) -> tuple[ChatMessage, ...]:
    out = []
    last_calls: dict[str, str] = {}  # tool name -> id of the latest call of it, for the results that follow
    for i, m in enumerate(items):
        if not isinstance(m, dict):
            raise InvalidRequest(f"messages[{i}] must be an object with 'role' and 'content'.", param="messages")
        content = m.get("content") or ""
        if not isinstance(content, str):
            raise InvalidRequest(f"messages[{i}].content must be text.", param="messages")
        pictures = _images(m["images"], f"messages[{i}].images") if m.get("images") else ()
        content = MEDIA_MARKER * len(pictures) + content  # as Ollama does: the pictures before the text
        role = str(m.get("role", ""))
        calls = []
        listed = m.get("tool_calls")
        listed = () if listed is None else listed
        if not isinstance(listed, list | tuple):
            raise InvalidRequest(f"messages[{i}].tool_calls must be a list of calls, each with a 'function'.",
                                 param="messages")  # fmt: skip
        for j, call in enumerate(listed):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise InvalidRequest(f"messages[{i}].tool_calls[{j}] has no function name.", param="messages")
            args = fn.get("arguments") or {}
            tc = ToolCall(name=fn["name"], arguments=args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                          **({"id": call["id"]} if isinstance(call.get("id"), str) else {}))  # fmt: skip
            last_calls[tc.name] = tc.id
            calls.append(tc)
        name = m.get("tool_name") or m.get("name")
        call_id = m.get("tool_call_id") or (last_calls.get(name) if role == "tool" and name is not None else None)
        thinking = m.get("thinking")
        out.append(ChatMessage(role, content, tool_calls=tuple(calls), tool_call_id=call_id, name=name,
                               reasoning=thinking if isinstance(thinking, str) and thinking else None,
                               media=pictures))  # fmt: skip
    return tuple(out)


def _tool_fields(tools: list[dict[str, Any]] | None, think: bool | str | None, choice: Any = None) -> dict[str, Any]:
    if think is not None and not isinstance(think, bool) and think not in ("low", "medium", "high"):
        raise InvalidRequest("'think' must be true, false, or low, medium or high.", param="think")
    specs = parse_tools(tools)
    return {
        "tools": specs,
        "tool_choice": None if choice is None else parse_tool_choice(choice, specs),
        "thinking": think if isinstance(think, bool) else (None if think is None else True),
        "require_thinking": bool(think),  # as Ollama: a model that cannot think refuses, so a client can fall back
        "template_kwargs": (("reasoning_effort", think),) if isinstance(think, str) else (),
    }


def _calls(calls) -> list[dict]:
    out = []
    for c in calls:
        args = c.arguments_object
        out.append({"id": c.id, "function": {"name": c.name, "arguments": args if isinstance(args, dict) else {}}})
    return out


def _stats(run: DialectRun, final: GenerationChunk) -> dict:
    end = time.perf_counter()
    first = run.first_token_at or end
    prompt_eval = final.time_to_first_token if final.time_to_first_token is not None else first - run.t0 - run.load_seconds
    return {
        "done_reason": "length" if final.finish_reason == "length" else "stop",
        "total_duration": int((end - run.t0) * 1e9),
        "load_duration": int(run.load_seconds * 1e9),
        "prompt_eval_count": final.prompt_tokens,
        "prompt_eval_duration": int(max(prompt_eval, 0.0) * 1e9),
        "eval_count": final.completion_tokens,
        "eval_duration": int(max(end - first, 0.0) * 1e9),
    }


async def _keep(request: Request, keep: float | None) -> None:
    """After a request: a model asked to be kept 0 s is unloaded now (when no other request uses it)."""
    if keep == 0:
        await asyncio.to_thread(request.app.state.manager.reap_idle)


async def _load_or_unload(request: Request, model: targets.Target, keep: float | None, key: str, asked: str) -> dict:
    """An empty prompt or conversation: load the model (or unload it with ``keep_alive: 0``); a remote
    model has nothing to load here."""
    manager = request.app.state.manager
    reason = "load"
    if keep == 0 and is_local(model) and manager.state(model.name) == "not-loaded":
        reason = "unload"  # `ollama stop` of a model not loaded: nothing to load first, as in Ollama
    elif is_local(model):
        lm = await asyncio.to_thread(manager.acquire, model.name)
        set_keep_alive(request, lm, keep)
        manager.release(lm)
        if keep == 0:
            await asyncio.to_thread(manager.reap_idle)
            reason = "unload"
    body = {"model": asked, "created_at": now_iso(), key: "", "done": True, "done_reason": reason}
    return body if key == "response" else {**body, "message": {"role": "assistant", "content": ""}}


async def _run(
    request: Request, req: GenerationRequest, keep: float | None, model: targets.Target, documents: DocumentsAsked | None
) -> DialectRun:
    run = await DialectRun(request, req, target=model, documents=documents).start(time_load=True)
    if run.gen.lm is not None:  # a local model: kept as long as asked
        set_keep_alive(request, run.gen.lm, keep)
    return run


async def _run_fitted(
    request: Request, req: GenerationRequest, keep: float | None, model: targets.Target, documents: DocumentsAsked | None
) -> DialectRun:
    """:func:`_run`, with a conversation too long for the context cut as Ollama cuts it: its oldest messages are
    left out (the system messages before them kept, the last message always) until the rest fits with a quarter
    of the context (or ``num_predict``, if less) left for the answer. A last message too long on its own loses its
    beginning (:func:`_cut_last_message`), as Ollama's runner keeps a prompt's end.

    Raises:
        ContextLengthExceeded: the last message cannot be cut (it holds a picture), or the rest does not fit.
    """
    try:
        return await _run(request, req, keep, model, documents)
    except ContextLengthExceeded as exc:
        limit = prompt_room(exc.n_ctx, req.params.max_tokens)
        if len(req.messages or ()) < 2:
            return await _run(request, await _cut_last_message(request, req, limit, exc), keep, model, documents)
        fitted, fits = await without_oldest(request, req, exc.n_ctx)
        if not fits:
            fitted = await _cut_last_message(request, fitted, limit, exc)
        return await _run(request, fitted, keep, model, documents)


async def _cut_last_message(
    request: Request, req: GenerationRequest, limit: int, exc: ContextLengthExceeded
) -> GenerationRequest:
    """``req`` with its last message's beginning left out, so that the prompt takes at most ``limit`` tokens: what
    Ollama's runner does to a prompt over the context ("truncating input prompt"), which keeps the end, where a
    question about a pasted text usually is. The cut falls at a space where one is near.

    Raises:
        ContextLengthExceeded: ``exc``, where the message holds a picture or a sound (no text cut can shorten those),
            the request goes on from a ``context``, or the rest of the prompt does not fit alone.
    """
    messages = req.messages or ()
    last = messages[-1] if messages else None
    if last is None or last.media or MEDIA_MARKER in last.content or req.context or not last.content:
        raise exc

    def keeping(n: int) -> GenerationRequest:
        text = last.content[len(last.content) - n :] if n else ""
        if n and n < len(last.content):
            space = text.find(" ", 0, 64)
            text = text[space + 1 :] if space >= 0 else text
        return replace(req, messages=(*messages[:-1], replace(last, content=text)))

    bare = await count_prompt_tokens(request, keeping(0))
    if bare >= limit:
        raise exc
    whole = await count_prompt_tokens(request, req)
    # A first guess from the whole text's tokens per character; then, as the end may be denser or sparser than the
    # whole (code or CJK after prose), the most characters that fit: growing a quarter at a time while they fit,
    # then halving between what fits and what does not, to within a line or so.
    per_char = max(1e-6, (whole - bare) / len(last.content))
    fit, over = 0, len(last.content)  # keeping(fit) fits (bare < limit); keeping(over) does not (the whole)
    n = max(1, min(over - 1, int((limit - bare) / per_char)))
    grow = True
    while over - fit > max(16, fit // 50):
        if await count_prompt_tokens(request, keeping(n)) <= limit:
            fit = n
        else:
            over, grow = n, False
        n = min(over - 1, n + max(16, n // 4)) if grow else (fit + over) // 2
    log.info("a %d-token prompt was cut to fit %d tokens of the context: its last message lost its first %d "
             "characters", whole, limit, len(last.content) - fit)  # fmt: skip
    return keeping(fit)


def _line(payload: dict) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _context(final: GenerationChunk) -> dict:
    """Ollama's ``context`` on an answer's last line: the ids of its prompt and answer, which a later /api/generate
    sends back to go on from them (``GenerationRequest.context``); none where the request gives none."""
    return {"context": list(final.context)} if final.context else {}


async def _lines(request: Request, run: DialectRun, keep: float | None, piece, asked: str) -> AsyncIterator[bytes]:
    final = GenerationChunk(finish_reason="stop")
    if run.gen.grounding is not None:  # a grounded answer's sources, in a line before its text
        yield _line(run.with_sources({"model": asked, "created_at": now_iso(), **piece(""), "done": False}))
    async for chunk in run.chunks():
        if chunk.finish_reason == "error":
            yield _line(ollama_error(*run.failure_message(chunk)))
            return
        if chunk.text or chunk.reasoning:
            line = {"model": asked, "created_at": now_iso(), **piece(chunk.text, chunk.reasoning), "done": False}
            if run.req.params.logprobs is not None and chunk.text:
                line["logprobs"] = [lp.as_openai() for lp in chunk.logprobs]
            yield _line(line)
        if chunk.finish_reason is not None:
            final = chunk
    if final.tool_calls:  # Ollama sends each call whole, in a line before the last
        yield _line({"model": asked, "created_at": now_iso(), **piece("", "", final.tool_calls), "done": False})
    yield _line({"model": asked, "created_at": now_iso(), **piece(""), "done": True, **_stats(run, final),
                 **_context(final)})  # fmt: skip
    await _keep(request, keep)


async def _answer(
    request: Request, req: GenerationRequest, keep: float | None, stream: bool, piece, model: targets.Target,
    documents: DocumentsAsked | None = None, *, asked: str, truncate: bool = False,
):  # fmt: skip
    """The answer to ``req``, streamed in lines or whole; its ``model`` is the name as ``asked`` (as Ollama's)."""
    run = await (_run_fitted if truncate else _run)(request, req, keep, model, documents)
    if stream:
        return streamed(run.gen, _lines(request, run, keep, piece, asked), media_type=NDJSON)
    text, reasoning, final = await run.collect()
    await _keep(request, keep)
    body = piece(text, reasoning, final.tool_calls)
    if req.params.logprobs is not None:
        body["logprobs"] = [lp.as_openai() for lp in run.text_logprobs]
    return run.with_sources({"model": asked, "created_at": now_iso(), **body, "done": True,
                             **_stats(run, final), **_context(final)})  # fmt: skip


def _chat_piece(text: str, reasoning: str = "", calls=()) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["thinking"] = reasoning
    if calls:
        message["tool_calls"] = _calls(calls)
    return {"message": message}


def _generate_piece(text: str, reasoning: str = "", calls=()) -> dict:
    return {"response": text, **({"thinking": reasoning} if reasoning else {})}


@router.post("/chat")
async def chat(request: Request, body: ChatBody):
    found = await target(request, body.model)
    keep = keep_alive_seconds(body.keep_alive)
    check_keep_alive(request, found, keep)
    await apply_load_options(request, found, body.options)  # num_ctx, num_gpu...: reloaded with them
    if not body.messages:
        return await _load_or_unload(request, found, keep, "message", body.model)
    messages = await asyncio.to_thread(_chat_messages, body.messages)  # pictures are read off the event loop
    req = GenerationRequest(
        model=found.name,
        messages=messages,
        continue_final=answer_begun(messages),  # a last assistant turn is gone on with, as Ollama does
        params=body.sampling(),
        unset=unset(body.sampling_options()),
        response_format=response_format(body.format),
        speculative=body.speculative,
        **_tool_fields(body.tools, body.think, body.tool_choice),
    )
    return await _answer(request, req, keep, body.stream, _chat_piece, found, documents_asked(body), asked=body.model,
                         truncate=body.truncate)


@router.post("/generate")
async def generate(request: Request, body: GenerateBody):
    found = await target(request, body.model)
    keep = keep_alive_seconds(body.keep_alive)
    check_keep_alive(request, found, keep)
    if body.images and body.raw:
        raise InvalidRequest("'images' cannot go with 'raw': the prompt has no place for them; drop 'raw'.", param="images")
    pictures = await asyncio.to_thread(_images, body.images, "images") if body.images else ()
    await apply_load_options(request, found, body.options)  # num_ctx, num_gpu...: reloaded with them
    if not body.prompt and not body.suffix:  # a suffix alone: the cursor at the file's start, still filled
        return await _load_or_unload(request, found, keep, "response", body.model)
    common = {
        "model": found.name, "params": body.sampling(), "response_format": response_format(body.format),
        "speculative": body.speculative, "unset": unset(body.sampling_options()),
    }  # fmt: skip
    if body.suffix:  # insert: the code model fills in between the prompt and the suffix (engine.infill)
        if pictures:
            raise InvalidRequest("'images' cannot go with 'suffix': fill in the middle reads text only; drop one.",
                                 param="images")  # fmt: skip
        req = GenerationRequest(prompt="", infill=Infill(body.prompt, body.suffix), **common)
    elif body.raw:  # as in Ollama, a raw prompt neither takes nor gives a context
        req = GenerationRequest(prompt=body.prompt, **common)
    else:
        earlier = tuple(body.context or ())
        if earlier and not is_local(found):
            raise InvalidRequest(f"'context' holds token ids of a local model; model '{found.name}' runs at a "
                                 "provider: send the conversation as messages to /api/chat instead.", param="context")  # fmt: skip
        system = (ChatMessage("system", body.system),) if body.system else ()
        user = ChatMessage("user", MEDIA_MARKER * len(pictures) + body.prompt, media=pictures)
        # the answer's context: a local model's (a provider's ids are not here)
        req = GenerationRequest(messages=(*system, user), context=earlier, return_context=is_local(found), **common,
                                **_tool_fields(None, body.think))  # fmt: skip
    return await _answer(request, req, keep, body.stream, _generate_piece, found, documents_asked(body), asked=body.model,
                         truncate=body.truncate and req.messages is not None)


async def _embed(
    request: Request, name: str, texts: list[str], keep: float | None, *, truncate: bool = True
) -> tuple[str, list, int, float]:
    check_inputs(texts)
    found = await resolve(request, name)
    check_keep_alive(request, found, keep)
    model = found.name
    manager = request.app.state.manager
    t0 = time.perf_counter()
    lm = await asyncio.to_thread(manager.acquire, model)
    load = time.perf_counter() - t0
    try:
        set_keep_alive(request, lm, keep)
        vectors, n_tokens = await embed_for_client(request, lm, texts, truncate=truncate)
    except ContextLengthExceeded as exc:
        raise InvalidRequest(
            f"An input is {exc.prompt_tokens} tokens but model '{lm.model.name}' takes at most {exc.n_ctx}; "
            "shorten it, or leave 'truncate' on to cut it to fit.",
            param="input",
        ) from exc
    finally:
        manager.release(lm)
    if keep == 0:
        await asyncio.to_thread(manager.reap_idle)
    return lm.model.name, vectors, n_tokens, load


@router.post("/embed")
async def embed(request: Request, body: EmbedBody) -> dict:
    t0 = time.perf_counter()
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if not texts or any(not t for t in texts):
        raise InvalidRequest("'input' must be a non-empty string or a list of non-empty strings.", param="input")
    keep = keep_alive_seconds(body.keep_alive)
    name, vectors, n_tokens, load = await _embed(request, body.model, texts, keep, truncate=body.truncate)
    return {
        "model": body.model,  # as asked, as Ollama's
        "embeddings": [shorten(v, body.dimensions, name) for v in vectors],
        "total_duration": int((time.perf_counter() - t0) * 1e9),
        "load_duration": int(load * 1e9),
        "prompt_eval_count": n_tokens,
    }


@router.post("/embeddings")
async def embeddings(request: Request, body: EmbeddingsBody) -> dict:
    if not body.prompt:
        return {"embedding": []}
    _, vectors, _, _ = await _embed(request, body.model, [body.prompt], keep_alive_seconds(body.keep_alive))
    return {"embedding": vectors[0]}


__all__ = ["router", "resolve", "keep_alive_seconds", "params", "response_format", "now_iso"]
