"""A remote provider's model behind the stream-of-chunks interface a local backend has.

``hearth chat --model PROVIDER/MODEL`` and every dialect of the worker (Anthropic Messages, Responses,
Ollama) run a :class:`engine.types.GenerationRequest` on it exactly as on a local model: the request
is sent to the provider as an OpenAI chat completion (tools, tool results and the response format
included), and its answer streams back as :class:`engine.types.GenerationChunk` items (text, thinking,
tool-call pieces, and a last chunk with the finish reason, the token counts and the whole calls).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from engine import __version__
from engine.errors import InvalidRequest, RemoteError, RemoteStreamCut
from engine.images import readable_image
from engine.remote.client import FORWARDED_HEADER, MAX_ERROR_BYTES, status_error, transport_error
from engine.remote.providers import ProviderAccess, ProviderStore, split_model_id
from engine.sse import DONE, SseParser
from engine.tools import ToolCall
from engine.tools.parsers import ToolCallDelta
from engine.types import MEDIA_MARKER, ChatMessage, GenerationChunk, GenerationRequest, MediaInput

log = logging.getLogger(__name__)

_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls"}


def find_remote(model_id: str | None, store: ProviderStore | None = None) -> tuple[ProviderAccess, str] | None:
    """``(provider with its key, the provider's model id)`` when ``model_id`` is ``provider/model``
    for a provider of ``hearth remote`` (as the API routes it), else None."""
    if not model_id or "/" not in model_id:
        return None
    store = store or ProviderStore()
    providers = {p.name: p for p in store.list()}
    split = split_model_id(model_id, set(providers))
    if split is None:
        return None
    return store.access(providers[split[0]]), split[1]


def _media_part(item: MediaInput) -> dict[str, Any]:
    """A picture or a sound as an OpenAI content part (the bytes were checked at Hearth's HTTP edge)."""
    if item.kind == "audio":
        data = base64.b64encode(item.data).decode()
        fmt = "wav" if item.data[:4] == b"RIFF" else "flac" if item.data[:4] == b"fLaC" else "mp3"
        return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    picture = readable_image(item.data, item.where)  # PNG, JPEG, GIF or BMP: a WebP or TIFF as PNG
    data = base64.b64encode(picture).decode()
    head = picture[:4]
    mime = {b"\x89PNG": "png", b"GIF8": "gif"}.get(head) or ("jpeg" if head[:2] == b"\xff\xd8" else "bmp" if head[:2] == b"BM" else "png")
    return {"type": "image_url", "image_url": {"url": f"data:image/{mime};base64,{data}"}}


def _content(m: ChatMessage) -> str | list[dict[str, Any]]:
    """The message's text, or with pictures and sounds its parts in order (each where its marker is)."""
    if not m.media:
        return m.content
    texts = m.content.split(MEDIA_MARKER)
    parts: list[dict[str, Any]] = []
    for i, text in enumerate(texts):
        if text:
            parts.append({"type": "text", "text": text})
        if i < len(m.media):
            parts.append(_media_part(m.media[i]))
    return parts


def _message(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": _content(m)}
    if m.tool_calls:
        out["tool_calls"] = [c.as_openai() for c in m.tool_calls]
        out["content"] = m.content or None
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None and m.role == "tool":
        out["name"] = m.name
    return out


def request_body(request: GenerationRequest, remote_id: str) -> dict[str, Any]:
    """``request`` as the body of an OpenAI chat completion (or, for a raw prompt, a completion) for
    ``remote_id``, streamed with usage. Only what the request sets away from its defaults is sent,
    so a strict server (OpenAI's own) sees no field it does not know."""
    p = request.params
    body: dict[str, Any] = {"model": remote_id, "stream": True, "stream_options": {"include_usage": True}}
    if request.infill is not None:  # OpenAI's completion suffix: the provider builds its own prompt
        body["prompt"] = request.infill.prefix + (request.prompt or "")
        body["suffix"] = request.infill.suffix
    elif request.messages is None:
        body["prompt"] = request.prompt or ""
    else:
        body["messages"] = [_message(m) for m in request.messages]
    body["temperature"] = p.temperature
    body["top_p"] = p.top_p
    optional = {
        "max_tokens": p.max_tokens,
        "seed": p.seed,
        "stop": list(p.stop) or None,
        "presence_penalty": p.presence_penalty or None,
        "frequency_penalty": p.frequency_penalty or None,
        "top_k": p.top_k or None,  # vLLM's, SGLang's and llama.cpp's own extensions
        "min_p": p.min_p or None,
        "repetition_penalty": p.repetition_penalty if p.repetition_penalty != 1.0 else None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    fmt = request.response_format
    if fmt.type == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif fmt.type == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": dict(fmt.schema or {})}}
    elif fmt.type == "grammar":
        raise InvalidRequest(f"A grammar ('{fmt.param}') holds the output of local models only; ask a local model, "
                             "or describe the output with a JSON schema.", param=fmt.param)  # fmt: skip
    if request.tools and request.messages is not None:
        body["tools"] = [t.as_openai() for t in request.tools]
        choice = request.tool_choice
        if choice is not None and choice.mode == "function":
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        elif choice is not None and choice.allowed is not None:
            body["tool_choice"] = {"type": "allowed_tools", "allowed_tools": {
                "mode": choice.mode, "tools": [{"type": "function", "function": {"name": n}} for n in choice.allowed]}}  # fmt: skip
        elif choice is not None:
            body["tool_choice"] = choice.mode
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    return body


class _Answer:
    """One answer as it streams: the events' pieces turned into chunks, the calls and counts kept."""

    def __init__(self) -> None:
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        self.finish: str | None = None
        self.prompt_tokens = 0
        self.completion_tokens: int | None = None
        self.pieces = 0

    def feed(self, data: str) -> list[GenerationChunk]:
        """The chunks of one event (a malformed event is skipped)."""
        try:
            event = json.loads(data)
        except ValueError:
            log.debug("skipping a non-JSON event: %.80s", data)
            return []
        if not isinstance(event, dict):
            return []
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
        out = []
        choices = event.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = d if isinstance(d := choice.get("delta"), dict) else {}
            text = c if isinstance(c := delta.get("content"), str) else ""
            if not text and isinstance(t := choice.get("text"), str):  # a completion's event
                text = t
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            thought = thought if isinstance(thought, str) else ""
            deltas = self._call_deltas(delta.get("tool_calls"))
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.finish = _FINISH.get(reason, "stop")
            if text or thought or deltas:
                self.pieces += 1
                out.append(GenerationChunk(text=text, reasoning=thought, tool_call_deltas=tuple(deltas)))
        return out

    def _call_deltas(self, items: Any) -> list[ToolCallDelta]:
        out = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            index = i if isinstance(i := item.get("index"), int) else len(self.calls)
            fn = f if isinstance(f := item.get("function"), dict) else {}
            args = a if isinstance(a := fn.get("arguments"), str) else ""
            if index not in self.calls:
                call_id = c if isinstance(c := item.get("id"), str) else f"call_{index}"
                name = n if isinstance(n := fn.get("name"), str) else ""
                self.calls[index] = [call_id, name, args]
                out.append(ToolCallDelta(index=index, id=call_id, name=name))
            else:
                self.calls[index][2] += args
            if args:
                out.append(ToolCallDelta(index=index, arguments=args))
        return out

    def last(self, first: float | None, started: float) -> GenerationChunk:
        calls = tuple(ToolCall(name=name, arguments=args or "{}", id=cid) for cid, name, args in self.calls.values())
        finish = "tool_calls" if calls and self.finish in (None, "stop", "tool_calls") else (self.finish or "stop")
        completion = self.completion_tokens if self.completion_tokens is not None else self.pieces
        elapsed = time.monotonic() - started - (first or 0.0)
        return GenerationChunk(
            finish_reason=finish,  # type: ignore[arg-type]
            prompt_tokens=self.prompt_tokens,
            completion_tokens=completion,
            time_to_first_token=first,
            tokens_per_second=completion / elapsed if completion and elapsed > 0 else None,
            tool_calls=calls,
        )


class RemoteChat:
    """A provider's model with the part of the backend protocol a generation needs: :meth:`open`
    (and :meth:`stream`), :meth:`cancel`, :meth:`prompt_tokens` and :meth:`close`.

    Args:
        access: The provider and its key.
        remote_id: The model's id at the provider.
        name: The model's public ``provider/model`` id (what answers name).
    """

    def __init__(self, access: ProviderAccess, remote_id: str, *, name: str | None = None) -> None:
        self.access = access
        self.remote_id = remote_id
        self.name = name or f"{access.name}/{remote_id}"
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._http = httpx.Client(
            headers={"User-Agent": f"hearth/{__version__}", FORWARDED_HEADER: "1"},
            follow_redirects=True,
            trust_env=False,
        )

    def open(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """Send ``request`` and return its answer's chunks once the provider has accepted it.

        Closing the iterator, or :meth:`cancel`, closes the connection (the provider stops generating).

        Raises:
            RemoteError: before the answer, the provider cannot be reached or refuses the request
                (the type says why); while iterating, it stops or times out mid-answer.
        """
        access = self.access
        seconds = access.provider.timeout
        path = "/completions" if request.messages is None else "/chat/completions"
        try:
            http_request = self._http.build_request(
                "POST",
                f"{access.base_url}{path}",
                json=request_body(request, self.remote_id),
                headers={**access.headers(), "Accept": "text/event-stream"},
                timeout=httpx.Timeout(seconds, connect=min(5.0, seconds)),
            )
            response = self._http.send(http_request, stream=True)
        except httpx.HTTPError as exc:
            raise transport_error(exc, access, seconds) from None
        if response.status_code >= 400:
            content = b""
            try:
                for part in response.iter_bytes():
                    content += part
                    if len(content) >= MAX_ERROR_BYTES:
                        break
            except httpx.HTTPError:
                pass
            finally:
                response.close()
            raise status_error(response.status_code, content, access)
        return self._chunks(request, response)

    def _chunks(self, request: GenerationRequest, response: httpx.Response) -> Iterator[GenerationChunk]:
        access = self.access
        started = time.monotonic()
        first: float | None = None
        answer = _Answer()
        parser = SseParser()
        done = False
        try:
            for raw in response.iter_bytes():
                if request.request_id in self._cancelled:
                    yield GenerationChunk(finish_reason="cancelled", completion_tokens=answer.pieces)
                    return
                for data in parser.feed(raw):
                    done = done or data.strip() == DONE
                    for chunk in [] if done else answer.feed(data):
                        first = first if first is not None else time.monotonic() - started
                        yield chunk
                if done:
                    break
            if not done and answer.finish is None:
                raise RemoteStreamCut(provider=access.name, url=access.base_url, reason="no end of answer")
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.RemoteProtocolError):
                raise RemoteStreamCut(provider=access.name, url=access.base_url, reason="the connection closed mid-answer") from None
            raise transport_error(exc, access, access.provider.timeout) from None
        finally:
            response.close()
            with self._lock:
                self._cancelled.discard(request.request_id)
        yield answer.last(first, started)

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """The answer, chunk by chunk; every failure ends it with one chunk whose ``finish_reason`` is
        ``error`` (for a terminal chat, which goes on after it)."""
        pieces = 0
        try:
            for chunk in self.open(request):
                pieces += bool(chunk.text)
                yield chunk
        except RemoteError as exc:
            yield GenerationChunk(finish_reason="error", completion_tokens=pieces, error=str(exc))

    def cancel(self, request_id: str) -> None:
        """Stop the answer to ``request_id`` at its next event (its connection closes)."""
        with self._lock:
            self._cancelled.add(request_id)

    def prompt_tokens(self, request: GenerationRequest) -> list[int]:
        """Raises InvalidRequest: a provider's tokenizer is not reachable from here."""
        raise InvalidRequest(
            f"Hearth cannot count tokens for the remote model '{self.name}'; its provider counts them in each answer's usage.",
            param="model",
        )

    def close(self) -> None:
        self._http.close()


__all__ = ["RemoteChat", "find_remote", "request_body"]
