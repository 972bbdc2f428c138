"""llama-server's own completion endpoints: ``POST /completion`` (a raw prompt) and ``POST /infill`` (fill in
the middle: ``input_prefix``, ``input_suffix``, other files as ``input_extra``, engine.infill), in its body and
answer shapes, with ``GET /props`` (the model's context, slots and chat template), for the editors' completion plugins (llama.vscode, llama.vim) and other clients of llama-server.

The answer is llama-server's: ``content``, ``stop``, ``stop_type`` (``eos``, ``word``, ``limit``),
``stopping_word``, ``tokens_predicted``, ``tokens_evaluated``, ``tokens_cached``, ``timings`` (``prompt_n``,
``prompt_ms``, ``predicted_n``, ``predicted_ms`` and their rates), ``generation_settings``; streamed, one
``data:`` event per piece (``stop`` false) and the whole answer's figures last. ``n_predict`` 0 reads the prompt
into the cache and answers nothing (a plugin warms the cache with the files around the cursor so). What
llama-server stops a completion for besides the token limit holds here: ``t_max_predict_ms`` (a piece with a
newline ends the answer once that long has passed since its first token) and ``n_indent`` (a line indented less
ends it, cut at its first character). Without ``model``, ``/completion`` goes to the loaded model used most
recently, ``/infill`` to the loaded model used most recently that can fill in the middle.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from engine import __version__
from engine.errors import ContextLengthExceeded, InvalidRequest
from engine.infill import DEFAULT_FILENAME, Infill, file_has_markers
from engine.server import chat_tools
from engine.server.dialect import JsonBodyRoute
from engine.server.embeddings import check_inputs, embed_for_client
from engine.server.errors import ERROR_RESPONSES, stream_error_body
from engine.server.generation import Generation, streamed
from engine.server.ollama_models import model_header
from engine.server.openai_routes import chat_messages
from engine.server.schemas import ChatCompletionBody
from engine.server.tokenize_routes import acquire_local, codec_of, model_or_default
from engine.types import GenerationChunk, GenerationRequest, ResponseFormat, SamplingParams

router = APIRouter(responses=ERROR_RESPONSES, route_class=JsonBodyRoute)  # llama-server reads any body as JSON

# llama-server's sampling defaults, for a client that relies on them
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
MAX_TEXT_CHARS = 4_000_000  # a field's text (a long source file is well within)
RANDOM_SEED = 0xFFFFFFFF  # llama-server's seed for "a random one"
BIAS_BOUND = 100.0  # a logit bias's bound, as the other dialects take it


class ExtraFile(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str = Field(max_length=MAX_TEXT_CHARS)
    filename: str | None = Field(None, max_length=4096)


class NativeBody(BaseModel):
    """llama-server's completion fields Hearth reads; the rest (``cache_prompt``, ``samplers``, ``id_slot``,
    ``t_max_prompt_ms``...) are accepted and left: the prompt cache is always on. A GBNF ``grammar`` is enforced."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    # text, or (/completion) the model's token ids: checked where it is read, with a sentence that says so
    prompt: Any = Field(None, json_schema_extra={"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]})
    n_predict: int | None = Field(None, ge=-1)
    max_tokens: int | None = Field(None, ge=-1)
    temperature: float | None = Field(None, ge=0)  # no upper bound, as llama-server's
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, ge=0, le=1)
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, ge=0.01, le=10)
    repeat_last_n: int = Field(64, ge=-1)  # the penalties read the last 64 tokens of prompt and answer (-1: all)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    stop: list[str] | None = None
    ignore_eos: StrictBool = False
    n_probs: int = Field(0, ge=0, le=20)
    stream: StrictBool = False
    t_max_predict_ms: int = Field(0, ge=0)
    n_indent: int = Field(0, ge=0)
    return_tokens: StrictBool = False
    # constrained output, as llama-server takes it: a JSON schema (or response_format), and biases by token id
    json_schema: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logit_bias: Any = None
    grammar: str | None = None


class InfillBody(NativeBody):
    input_prefix: str = Field(max_length=MAX_TEXT_CHARS)
    input_suffix: str = Field(max_length=MAX_TEXT_CHARS)
    input_extra: list[ExtraFile] = Field(default_factory=list, max_length=1024)


def _params(body: NativeBody) -> SamplingParams:
    n = body.n_predict if body.n_predict is not None else body.max_tokens
    pick = lambda name: DEFAULTS[name] if getattr(body, name) is None else getattr(body, name)  # noqa: E731
    return SamplingParams(
        temperature=pick("temperature"), top_k=pick("top_k"), top_p=pick("top_p"), min_p=pick("min_p"),
        repetition_penalty=body.repeat_penalty or 1.0, presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0, seed=None if body.seed is None or body.seed < 0 else body.seed,
        stop=tuple(body.stop or ()), max_tokens=1 if n == 0 else None if n is None or n < 0 else n,
        ignore_eos=body.ignore_eos, logprobs=body.n_probs or None, penalty_last_n=body.repeat_last_n,
    )  # fmt: skip


class _Limits:
    """llama-server's ends besides the token limit, on the text as it comes: ``n_indent`` (a line, once its
    first character other than a space or tab comes, indented less than that ends the answer there; a blank line
    too) and ``t_max_predict_ms`` (a piece with a newline ends it once that long has passed since the first
    token, so the answer ends with whole lines)."""

    def __init__(self, body: NativeBody) -> None:
        self.ms = body.t_max_predict_ms
        self.indent = body.n_indent
        self.text = ""
        self.first_at: float | None = None
        self.line: int | None = None  # where the line whose indentation is not known yet starts
        self.scan = 0  # where to look for the next newline

    def take(self, piece: str, now: float) -> tuple[str, bool]:
        """The part of ``piece`` to give, and whether the answer ends with it."""
        if self.first_at is None and piece:
            self.first_at = now
        start = len(self.text)
        self.text += piece
        while self.indent > 0:
            if self.line is None:
                nl = self.text.find("\n", self.scan)
                if nl < 0:
                    break
                self.line = self.scan = nl + 1
            pos = self.line
            while pos < len(self.text) and self.text[pos] in " \t":
                pos += 1
            if pos == len(self.text):  # its first character is still to come
                break
            if pos - self.line < self.indent:
                self.text = self.text[:pos]
                return self.text[start:], True
            self.line = None
        timed_out = self.ms > 0 and "\n" in piece and self.first_at is not None and (now - self.first_at) * 1000 > self.ms
        return piece, timed_out


def _probabilities(chunk: GenerationChunk) -> list[dict[str, Any]]:
    """The chunk's tokens as llama-server's ``completion_probabilities``, each alternative with its id."""
    return [
        {"id": lp.token_id, "token": lp.token, "bytes": list(lp.bytes), "logprob": lp.logprob,
         "top_logprobs": [{"id": i, "token": t, "logprob": p, "bytes": list(b)}
                          for i, (t, p, b) in zip(lp.top_ids or (None,) * len(lp.top), lp.top, strict=True)]}  # fmt: skip
        for lp in chunk.logprobs
    ]


def _stop_type(final: GenerationChunk | None, limited: bool) -> str:
    if limited or (final is not None and final.finish_reason == "length"):
        return "limit"
    if final is not None and final.stop_sequence:
        return "word"
    return "eos" if final is not None and final.finish_reason == "stop" else "none"


async def _run(request: Request, body: NativeBody, name: str, req: GenerationRequest, warm: bool):
    gen = Generation(request, name, [replace(req, model=name)])
    await gen.start()
    answer = _answer(gen, body, warm)
    if body.stream:
        return streamed(gen, answer)
    last: dict[str, Any] = {}
    content = []
    probs: list[dict[str, Any]] = []
    tokens: list[int] = []
    try:
        async for event in answer:
            if "error" in event:
                raise gen.failure(0, event["error"])
            content.append(event["content"])
            probs += event.get("completion_probabilities", [])
            tokens += event["tokens"]
            last = event
    finally:
        await answer.aclose()
    out = {**last, "content": "".join(content), "tokens": tokens if body.return_tokens else []}
    if body.n_probs:
        out["completion_probabilities"] = probs
    return out


async def _answer(gen: Generation, body: NativeBody, warm: bool) -> AsyncGenerator[Any]:
    """The answer's events: dicts, or (streamed) their ``data:`` lines; an error ends it with its body."""
    streamed = body.stream
    limits = _Limits(body)
    final: GenerationChunk | None = None
    limited = False  # ended by t_max_predict_ms or n_indent: cancelled, its last chunk awaited for the figures
    predicted = 0
    first_at: float | None = None
    chunks = gen.chunks(watch_client=not streamed)
    try:
        async for _, chunk in chunks:
            now = time.perf_counter()
            if chunk.finish_reason == "error" and not limited:
                if streamed:
                    yield f"data: {json.dumps(stream_error_body(gen.failure(0, chunk)))}\n\n".encode()
                else:
                    yield {"error": chunk}
                return
            if chunk.token_ids and first_at is None:
                first_at = now
            if chunk.finish_reason is not None:
                final = chunk
            if warm or limited:
                continue
            text, stop = limits.take(chunk.text, now)
            predicted += len(chunk.token_ids)
            if text or chunk.token_ids:
                event = {"index": 0, "content": text, "tokens": list(chunk.token_ids), "stop": False, "id_slot": -1,
                         "tokens_predicted": predicted}  # fmt: skip
                if body.n_probs:
                    event["completion_probabilities"] = _probabilities(chunk)
                yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode() if streamed else event
            if stop and final is None:
                limited = True
                for r in gen.requests:
                    gen.served.cancel(r.request_id)
    finally:
        await chunks.aclose()
    end = time.perf_counter()
    prompt_tokens = final.prompt_tokens if final is not None else 0
    cached = final.cached_tokens if final is not None else 0
    n = 0 if warm else (final.completion_tokens if final is not None and not limited else predicted)
    prompt_ms = ((first_at or end) - gen.t0) * 1000  # from the request's start: its prompt was sent before this
    predicted_ms = (end - first_at) * 1000 if first_at is not None and not warm else 0.0
    params = gen.requests[0].params
    # llama-server's: the answer ran into the end of the slot's context, not its n_predict (a max_tokens over the
    # context was lowered to the context itself: engine.server.request_caps)
    truncated = (final is not None and final.finish_reason == "length" and not warm and not limited
                 and (params.max_tokens is None or n < params.max_tokens))  # fmt: skip
    figures = {
        "index": 0, "content": "", "tokens": [], "id_slot": -1, "stop": True, "model": gen.served_name,
        "tokens_predicted": n, "tokens_evaluated": prompt_tokens, "tokens_cached": prompt_tokens + max(0, n - 1),  # the cache after: the last token drawn is never read
        "stop_type": "limit" if warm else _stop_type(final, limited),
        "stopping_word": (final.stop_sequence or "") if final is not None else "",
        "has_new_line": "\n" in limits.text, "truncated": truncated,
        "generation_settings": {"n_predict": -1 if params.max_tokens is None else 0 if warm else params.max_tokens,
                                "temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
                                "min_p": params.min_p, "seed": RANDOM_SEED if params.seed is None else params.seed, "stop": list(params.stop),
                                "repeat_last_n": body.repeat_last_n, "repeat_penalty": params.repetition_penalty,
                                "presence_penalty": params.presence_penalty, "frequency_penalty": params.frequency_penalty,
                                "n_probs": body.n_probs, "ignore_eos": params.ignore_eos, "model": gen.served_name},
        "timings": {
            "cache_n": cached, "prompt_n": prompt_tokens - cached, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / max(1, prompt_tokens - cached),
            "prompt_per_second": (prompt_tokens - cached) / (prompt_ms / 1000) if prompt_ms > 0 else 0.0,
            "predicted_n": n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / n if n else 0.0,
            "predicted_per_second": n / (predicted_ms / 1000) if n and predicted_ms > 0 else 0.0,
        },
    }  # fmt: skip
    yield f"data: {json.dumps(figures, ensure_ascii=False)}\n\n".encode() if streamed else figures


def _request(body: NativeBody, *, prompt: str, infill: Infill | None = None, ids: tuple[int, ...] | None = None) -> GenerationRequest:
    params = replace(_params(body), logit_bias=_logit_bias(body.logit_bias))
    return GenerationRequest(model=body.model or "", prompt=prompt, prompt_ids=ids, infill=infill, params=params,
                             response_format=_format(body))  # fmt: skip


def _format(body: NativeBody) -> ResponseFormat:
    """The output's constraint: ``json_schema``, else ``response_format`` (``json_object``, with a ``schema`` or
    not, or ``json_schema`` with its ``json_schema.schema``), as llama-server reads them.

    A GBNF ``grammar`` is read by llguidance (engine.tools.guidance.user_grammar), never by llama.cpp's parser.

    Raises:
        InvalidRequest: a format of another type, or more than one of them.
    """
    if body.grammar:
        if body.json_schema is not None or (body.response_format or {}).get("type", "text") != "text":
            raise InvalidRequest("Give one of 'grammar', 'json_schema' and 'response_format', not several.", param="grammar")
        return ResponseFormat(type="grammar", grammar=body.grammar, syntax="gbnf", param="grammar")
    if body.json_schema is not None:
        return ResponseFormat(type="json_schema", schema=body.json_schema)
    rf = body.response_format
    if rf is None or rf.get("type", "text") == "text":
        return ResponseFormat()
    if rf.get("type") not in ("json_object", "json_schema"):
        raise InvalidRequest("'response_format' must be of type text, json_object or json_schema.", param="response_format")
    schema = rf.get("schema")
    if schema is None and isinstance(rf.get("json_schema"), dict):
        schema = rf["json_schema"].get("schema")
    if schema is None:
        return ResponseFormat(type="json_object")
    if not isinstance(schema, dict):
        raise InvalidRequest("'response_format' holds a schema that is not a JSON object.", param="response_format")
    return ResponseFormat(type="json_schema", schema=schema)


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """llama-server's ``logit_bias``: ``[[id, bias], ...]`` or ``{"id": bias}``, a bias of ``false`` banning the
    token; a bias is held to +-:data:`BIAS_BOUND` (OpenAI's bounds: -100 bans a token, 100 all but forces it).

    Raises:
        InvalidRequest: another shape, a token given as text, or a bias that is not a finite number.
    """
    if value is None:
        return ()
    wrong = InvalidRequest("'logit_bias' must pair token ids (/tokenize gives them) with numbers, or false to ban a "
                           "token: [[15043, -1.5], [2, false]].", param="logit_bias")  # fmt: skip
    if not isinstance(value, (dict, list)):
        raise wrong
    out: list[tuple[int, float]] = []
    for pair in value.items() if isinstance(value, dict) else value:
        token, bias = pair if isinstance(pair, (list, tuple)) and len(pair) == 2 else (None, None)
        if isinstance(token, str) and token.lstrip("-").isdigit():
            token = int(token)
        if bias is False:
            bias = -BIAS_BOUND
        if (not isinstance(token, int) or isinstance(token, bool) or not isinstance(bias, (int, float))
                or isinstance(bias, bool) or not math.isfinite(bias)):  # fmt: skip
            raise wrong
        out.append((token, max(-BIAS_BOUND, min(BIAS_BOUND, float(bias)))))
    return tuple(out)


@router.post("/completion")
async def completion(request: Request, body: NativeBody):
    prompt = "" if body.prompt is None else body.prompt
    name = await model_or_default(request, body.model)
    if isinstance(prompt, list) and prompt and all(_is_id(t) for t in prompt):
        req = _request(body, prompt="", ids=tuple(prompt))
    elif isinstance(prompt, list) and prompt and all(_is_id(t) or isinstance(t, str) for t in prompt):
        req = _request(body, prompt="", ids=await _mixed_ids(request, name, prompt))
    elif isinstance(prompt, str):
        req = _request(body, prompt=prompt)
    else:
        raise InvalidRequest("'prompt' must be text, a list of the model's token ids, or a list of both.", param="prompt")
    return await _run(request, body, name, req, warm=_warm(body))


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


async def _mixed_ids(request: Request, name: str, parts: list[int | str]) -> tuple[int, ...]:
    """A prompt of token ids and texts, as llama-server reads one: each text's tokens in its place, special
    tokens written in it parsed, the model's BOS (or other added tokens) only before a text that opens it.

    Raises:
        InvalidRequest: the model has no tokenizer of llama.cpp's (not a GGUF model).
    """
    lm = await acquire_local(request, name, "A prompt of token ids and texts")

    def encode() -> tuple[int, ...]:
        codec = codec_of(lm)
        ids: list[int] = []
        for i, part in enumerate(parts):
            ids += [part] if isinstance(part, int) else codec.encode(part, add_special=i == 0, parse_special=True)
        return tuple(ids)

    try:
        return await asyncio.to_thread(encode)
    finally:
        request.app.state.manager.release(lm)


@router.post("/infill")
async def infill(request: Request, body: InfillBody):
    if body.prompt is not None and not isinstance(body.prompt, str):
        raise InvalidRequest("'prompt' of /infill is text typed at the cursor; give it as a string.", param="prompt")
    extra = tuple((DEFAULT_FILENAME if f.filename is None else f.filename, f.text) for f in body.input_extra)
    req = _request(body, prompt=body.prompt or "", infill=Infill(body.input_prefix, body.input_suffix, extra, project=True))
    name = body.model or await _code_model(request)
    try:
        return await _run(request, body, name, req, warm=_warm(body))
    except InvalidRequest as exc:
        if exc.param == "suffix":  # a model without the markers: this body's field
            exc.param = "model"
        raise


def _warm(body: NativeBody) -> bool:
    return (body.n_predict if body.n_predict is not None else body.max_tokens) == 0


@router.get("/props")
async def props(request: Request, model: str | None = None) -> dict:
    """llama-server's ``GET /props``: the model's context per slot, its slots, its chat template and what it takes
    (clients such as SillyTavern size their prompts from it); ``model`` names one (Hearth serves several), else the
    loaded model used most recently."""
    manager = request.app.state.manager
    lm = await acquire_local(request, model, "Reading a model's properties")
    try:
        info = lm.backend.info
        stats = lm.backend.stats()
        header = await asyncio.to_thread(model_header, lm.model)
    finally:
        manager.release(lm)
    template = header.get("tokenizer.chat_template") or header.get("chat_template") or ""
    defaults = {**DEFAULTS, "n_predict": -1, "seed": RANDOM_SEED, "stop": [], "n_probs": 0, "ignore_eos": False,
                "repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    return {
        "default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": info.n_ctx, "speculative": False,
                                        "is_processing": False, "params": defaults},  # fmt: skip
        "total_slots": stats.slots if stats is not None else 1,
        "model_alias": lm.model.name,
        "model_path": lm.model.name,  # the file's path is for the admin key (/api/models)
        "chat_template": template if isinstance(template, str) else "",
        "modalities": {"vision": info.vision, "audio": info.audio},
        "build_info": f"hearth {__version__}",
    }


class TemplateBody(ChatCompletionBody):
    """``/apply-template``'s body: a chat completion's messages and tools; ``model`` optional, as on the other
    routes of llama-server's."""

    model: str | None = None  # pyright: ignore[reportIncompatibleVariableOverride]


@router.post("/apply-template")
async def apply_template(request: Request, body: TemplateBody) -> dict:
    """llama-server's ``POST /apply-template``: the prompt a chat's messages (with its tools and thinking switch)
    make in the model's chat template, as a generation would render them; nothing is generated."""
    name = await model_or_default(request, body.model)
    messages = await asyncio.to_thread(chat_messages, body.messages, allow_remote=False)
    req = GenerationRequest(model=name, messages=messages, **chat_tools.request_fields(body))
    lm = await acquire_local(request, name, "Applying a chat template")
    try:
        rendered = await asyncio.to_thread(lm.backend.render_request, req)
    finally:
        request.app.state.manager.release(lm)
    return {"prompt": rendered.prompt if rendered is not None else ""}


class NativeEmbeddingBody(BaseModel):
    """llama-server's ``/embedding`` body: ``content`` (or ``input``), a text or a list of texts."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    content: str | list[str] | None = None
    input: str | list[str] | None = None


@router.post("/embedding")
@router.post("/embeddings", operation_id="embeddings_native")
async def embedding(request: Request, body: NativeEmbeddingBody) -> list[dict]:
    """llama-server's ``POST /embedding``: ``[{"index", "embedding": [vector]}]``, one per text, each vector pooled and
    normalised as ``/v1/embeddings`` gives it."""
    given = body.content if body.content is not None else body.input
    texts = [given] if isinstance(given, str) else list(given or ())
    if not texts or not all(texts):
        raise InvalidRequest("'content' must be a non-empty text or a list of non-empty texts.", param="content")
    check_inputs(texts)
    lm = await acquire_local(request, body.model, "Embedding")
    try:
        vectors, _ = await embed_for_client(request, lm, texts)
    except ContextLengthExceeded as exc:
        raise ContextLengthExceeded(exc.prompt_tokens, exc.n_ctx, param="content",
                                    message=f"A text is {exc.prompt_tokens} tokens but model '{lm.model.name}' takes at most "
                                    f"{exc.n_ctx}; shorten it or split it.") from exc  # fmt: skip
    finally:
        request.app.state.manager.release(lm)
    return [{"index": i, "embedding": [vec]} for i, vec in enumerate(vectors)]


async def _code_model(request: Request) -> str:
    """The model an /infill without ``model`` means (an editor's plugin names none): of the loaded models, the one
    used most recently that can fill in the middle, else the one used most recently (which then says it cannot)."""
    manager = request.app.state.manager
    if not manager.preloaded.is_set():
        await asyncio.to_thread(manager.preloaded.wait)
    loaded = sorted(manager.loaded(), key=lambda lm: lm.last_used, reverse=True)
    for lm in loaded:
        if await asyncio.to_thread(file_has_markers, Path(lm.model.path)):
            return lm.model.name
    return await model_or_default(request, None)


__all__ = ["router"]
