"""Talking to a server under test: what it is (probe) and one timed streaming request (send).

Requests are streaming chat completions, sent with ``stream_options={"include_usage": True}`` so servers that
report usage give exact token counts, and ``ignore_eos: true`` in the body so every request produces exactly
``max_tokens`` tokens on the servers that honour it (Hearth, vLLM, llama.cpp's ``llama-server``). Servers that
ignore it (such as ``python -m llama_cpp.server``) may stop early; the report then shows fewer output tokens per
request for them, and ``--extra-body '{"logit_bias": {"EOS_ID": -100}}'`` evens that out.

The client is aiohttp (its HTTP parser is C) with the server-sent events read here: at hundreds of streams the
client's own work is part of what a machine spends, and an SDK that builds an object of every chunk costs
several times a fast server's time per token (about 210 µs of CPU a chunk for ``openai``'s client, 35 µs here:
``benchmarks/bench_client.py``), so the client would measure itself. Every figure is taken on this side of the
connection with ``time.perf_counter``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.bench.workload import BenchRequest

log = logging.getLogger(__name__)

#: The longest server-sent event taken (a final chunk with long tool-call arguments or log-probabilities is
#: far below it); a longer one ends the request as a broken stream instead of growing without bound.
MAX_EVENT_BYTES = 16 << 20

#: The most of an error answer's body read for its message.
MAX_ERROR_BYTES = 64 << 10

#: Kept connections a request tries, each found closed by the server, before it fails.
STALE_RETRIES = 8


class StatusError(Exception):
    """The server answered the request with an HTTP error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class StreamError(Exception):
    """The stream broke off: an error event from the server, or a stream that is not one."""


class EventSource(Protocol):
    """What :func:`send` streams an answer from (:class:`ChatClient`)."""

    def events(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]: ...


class ChatClient:
    """Streaming chat completions from one OpenAI-compatible server (``base_url`` ends in ``/v1``). Made inside
    the event loop that uses it; :meth:`close` ends its connections."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        import aiohttp

        self.url = base_url.rstrip("/") + "/chat/completions"
        self.proxy = proxy_for(self.url)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # as many connections as the level keeps in flight
            # no limit on a whole answer (a long one at a low rate takes minutes); each read waits at most
            # ``timeout`` seconds, as a client would wait for a token
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=timeout),
            headers={"Authorization": f"Bearer {api_key or 'none'}"},
            # the proxy is looked up once (proxy_for); the environment's netrc would clash with the key's header
            trust_env=False,
            trace_configs=[_reuse_trace()],
        )

    async def events(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """POST ``body`` and yield each event of the answer's stream, parsed, as it arrives (events that arrived
        together one after another), up to ``[DONE]`` or the end of the stream.

        Raises:
            StatusError: the server refused the request.
            StreamError: an error event, or an answer that is not a stream of JSON events.
            aiohttp.ClientError, asyncio.TimeoutError: the connection failed or went silent.
        """
        import aiohttp

        for attempt in range(STALE_RETRIES + 1):
            sent = {"reused": False}
            try:
                resp = await self.session.post(self.url, json=body, proxy=self.proxy, trace_request_ctx=sent)
                break
            except aiohttp.ClientConnectionError:
                # a kept connection the server had closed (llama-server closes each after a stream, though its
                # headers keep it alive): the request never reached it, and goes again, as curl and httpx send it
                if not sent["reused"] or attempt == STALE_RETRIES:
                    raise
        else:
            raise AssertionError("not reached: the last attempt returns or raises")
        async with resp:
            if resp.status >= 400:
                text = b""
                while len(text) < MAX_ERROR_BYTES and (piece := await resp.content.read(MAX_ERROR_BYTES - len(text))):
                    text += piece
                raise StatusError(resp.status, _error_message(text))
            kind = resp.headers.get("Content-Type", "")
            if "text/event-stream" not in kind.lower():
                raise StreamError(f"the server answered with {kind or 'no content type'}, not a stream of events")
            buffer = b""
            data: list[bytes] = []  # the data lines of the event being read
            size = 0
            async for piece in resp.content.iter_any():
                buffer += piece
                if size + len(buffer) > MAX_EVENT_BYTES:
                    raise StreamError(f"an event of over {MAX_EVENT_BYTES >> 20} MiB")
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.endswith(b"\r"):
                        line = line[:-1]
                    if line:
                        if line.startswith(b"data:"):  # other fields (event, id, retry) and comments are skipped
                            data.append(_field_value(line))
                            size += len(line)
                        continue
                    if not data:
                        continue
                    text, data, size = b"\n".join(data), [], 0
                    if text.startswith(b"[DONE]"):
                        # read to the end of the body, as a client does: a connection left mid-body is closed,
                        # not kept for the next request
                        async for _ in resp.content.iter_any():
                            pass
                        return
                    if text:  # an event with empty data is not dispatched
                        yield _event(text)
            # a last event without its blank line (or its newline): taken, where the standard would drop it
            last = buffer.rstrip(b"\r")
            if last.startswith(b"data:"):
                data.append(_field_value(last))
            if data and (text := b"\n".join(data)) and not text.startswith(b"[DONE]"):
                yield _event(text)

    async def close(self) -> None:
        await self.session.close()


def _reuse_trace() -> Any:
    """An aiohttp trace that marks a request's context (a dict) when it goes out on a kept connection."""
    import aiohttp

    async def reused(_session: Any, context: Any, _params: Any) -> None:
        if isinstance(context.trace_request_ctx, dict):
            context.trace_request_ctx["reused"] = True

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(reused)
    return trace


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, less NO_PROXY), as the
    HTTP clients people use take it; never one for this machine's own addresses."""
    import ipaddress
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if local or proxy_bypass(host):
        return None
    proxies = getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


def _field_value(line: bytes) -> bytes:
    """What follows a field's colon, less the one space the standard allows after it."""
    value = line.split(b":", 1)[1]
    return value[1:] if value.startswith(b" ") else value


def _event(text: bytes) -> dict[str, Any]:
    try:
        event = json.loads(text)
    except ValueError:
        raise StreamError(f"an event that is not JSON: {_short(text.decode('utf-8', 'replace'))}") from None
    if not isinstance(event, dict):
        raise StreamError(f"an event that is not a JSON object: {_short(text.decode('utf-8', 'replace'))}")
    if event.get("error") is not None:
        raise StreamError(_error_message(event))
    return event


def _error_message(body: bytes | dict) -> str:
    """The message of an OpenAI-style error (``{"error": {"message": ...}}``, or a bare ``message`` or
    ``detail``), else the body's text."""
    if isinstance(body, bytes):
        try:
            parsed = json.loads(body)
        except ValueError:
            return _short(body.decode("utf-8", "replace")) or "no message"
    else:
        parsed = body
    if isinstance(parsed, dict):
        inner = parsed.get("error", parsed)
        if isinstance(inner, dict):
            for key in ("message", "detail"):
                if isinstance(inner.get(key), str) and inner[key]:
                    return inner[key]
        elif isinstance(inner, str) and inner:
            return inner
    return _short(json.dumps(parsed))


@dataclass(slots=True)
class RequestResult:
    """One measured request. Times in seconds; ``start`` is relative to the start of the level.

    ``output_tokens`` is the server's own ``usage.completion_tokens`` when it reports usage
    (``token_source == "usage"``), else the number of streamed content chunks (``"chunks"``).
    ``draft_tokens`` and ``accepted_draft_tokens`` are speculative decoding's drafted and kept tokens, from
    ``usage.completion_tokens_details`` (OpenAI's ``accepted_prediction_tokens`` and
    ``rejected_prediction_tokens``); None when the server does not say.
    """

    ok: bool
    start: float
    max_tokens: int
    e2e: float | None = None
    ttft: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    content_chunks: int = 0
    token_source: str = "chunks"
    finish_reason: str | None = None
    itl: list[float] = field(default_factory=list)
    error: str | None = None
    draft_tokens: int | None = None
    accepted_draft_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens the server's prefix cache held (usage.prompt_tokens_details)

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (e2e - ttft) / (output_tokens - 1)."""
        if not self.ok or self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "start_s": self.start,
            "max_tokens": self.max_tokens,
            "e2e_s": self.e2e,
            "ttft_s": self.ttft,
            "tpot_s": self.tpot,
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "content_chunks": self.content_chunks,
            "token_source": self.token_source,
            "finish_reason": self.finish_reason,
            "itl_s": self.itl,
            "error": self.error,
            "draft_tokens": self.draft_tokens,
            "accepted_draft_tokens": self.accepted_draft_tokens,
            "cached_tokens": self.cached_tokens,
        }


def _short(text: str, limit: int = 160) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe_error(exc: BaseException) -> str:
    """A short, stable description of why a request failed (grouped by it in the report)."""
    import aiohttp

    if isinstance(exc, StatusError):
        return _short(str(exc))
    if isinstance(exc, StreamError):
        return _short(f"error in the stream: {exc}")
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return "timeout: no answer within the request timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _short(f"connection error: {type(exc).__name__}: {exc}")
    if isinstance(exc, aiohttp.ClientError):
        return _short(f"stream broken: {type(exc).__name__}: {exc}")
    return _short(f"{type(exc).__name__}: {exc}")


def _number(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _drafts(usage: dict[str, Any]) -> tuple[int | None, int | None]:
    """Tokens drafted and kept, from a usage's ``completion_tokens_details`` (None, None: not reported)."""
    details = usage.get("completion_tokens_details")
    if not isinstance(details, dict):
        return None, None
    kept = _number(details.get("accepted_prediction_tokens"))
    refused = _number(details.get("rejected_prediction_tokens"))
    if kept is None and refused is None:
        return None, None
    return (kept or 0) + (refused or 0), kept or 0


def _still_cancelled(exc: BaseException | None = None) -> None:
    """Raise CancelledError if this task was cancelled (Ctrl-C) and the HTTP stack turned that into an error or
    an ended stream instead: the run must stop, not go on to its next request."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


async def send(
    client: EventSource,
    model: str,
    request: BenchRequest,
    *,
    level_start: float,
    temperature: float = 0.0,
    ignore_eos: bool = True,
    extra_body: dict[str, Any] | None = None,
) -> RequestResult:
    """Send ``request`` as a streaming chat completion and time it. Never raises for a failed
    request (it comes back with ``ok=False`` and the reason); cancellation propagates."""
    _still_cancelled()
    body: dict[str, Any] = {
        "model": model,
        "messages": list(request.messages),
        "max_tokens": request.max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    body.update(extra_body or {})
    start = time.perf_counter()
    result = RequestResult(ok=False, start=start - level_start, max_tokens=request.max_tokens)
    last: float | None = None
    usage: dict[str, Any] | None = None
    try:
        async for chunk in client.events(body):
            now = time.perf_counter()
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict):
                    continue
                delta = choice.get("delta")
                if isinstance(delta, dict):  # the answer, else its thinking (reasoning_content, or vLLM's reasoning)
                    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                    if text and isinstance(text, str):
                        result.content_chunks += 1
                        if last is None:
                            result.ttft = now - start
                        else:
                            result.itl.append(now - last)
                        last = now
                if choice.get("finish_reason"):
                    result.finish_reason = str(choice["finish_reason"])
        result.e2e = time.perf_counter() - start
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        _still_cancelled(exc)
        result.e2e = time.perf_counter() - start
        result.error = describe_error(exc)
        return result
    completion = _number(usage.get("completion_tokens")) if usage is not None else None
    if usage is not None and completion is not None:
        result.output_tokens = completion
        result.prompt_tokens = _number(usage.get("prompt_tokens"))
        result.token_source = "usage"
        result.draft_tokens, result.accepted_draft_tokens = _drafts(usage)
        details = usage.get("prompt_tokens_details")
        result.cached_tokens = _number(details.get("cached_tokens")) if isinstance(details, dict) else None
    else:
        result.output_tokens = result.content_chunks
    if result.finish_reason is None:
        result.error = "the stream ended without a finish_reason"
    elif result.ttft is None:
        result.error = f"no tokens streamed (finish_reason {result.finish_reason})"
    else:
        result.ok = True
    return result
