"""Talking to a server under test: what it is (probe) and one timed streaming request (send).

Requests go through the official ``openai`` client (``AsyncOpenAI``), streaming, with
``stream_options={"include_usage": True}`` so servers that report usage give exact token counts,
and ``ignore_eos: true`` in the body so every request produces exactly ``max_tokens`` tokens on the
servers that honour it (Hearth, vLLM, llama.cpp's ``llama-server``). Servers that ignore it (such as
``python -m llama_cpp.server``) may stop early; the report then shows fewer output tokens per request
for them, and ``--extra-body '{"logit_bias": {"EOS_ID": -100}}'`` evens that out.

Every figure is taken on this side of the connection with ``time.perf_counter``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from engine.bench.workload import BenchRequest

log = logging.getLogger(__name__)


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
    import httpx
    import openai

    if isinstance(exc, openai.APIStatusError):
        message = exc.message
        body = exc.body
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and inner.get("message"):
                message = inner["message"]
        return _short(f"HTTP {exc.status_code}: {message}")
    if isinstance(exc, openai.APITimeoutError):
        return "timeout: no answer within the request timeout"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return _short(f"connection error: {type(cause).__name__}: {cause}")
    if isinstance(exc, openai.APIError):
        return _short(f"error in the stream: {exc.message}")
    if isinstance(exc, httpx.HTTPError):
        return _short(f"stream broken: {type(exc).__name__}: {exc}")
    return _short(f"{type(exc).__name__}: {exc}")


def _drafts(usage: Any) -> tuple[int | None, int | None]:
    """Tokens drafted and kept, from a usage's ``completion_tokens_details`` (None, None: not reported)."""
    details = getattr(usage, "completion_tokens_details", None)
    kept = getattr(details, "accepted_prediction_tokens", None)
    refused = getattr(details, "rejected_prediction_tokens", None)
    if kept is None and refused is None:
        return None, None
    return int(kept or 0) + int(refused or 0), int(kept or 0)


def _still_cancelled(exc: BaseException | None = None) -> None:
    """Raise CancelledError if this task was cancelled (Ctrl-C) and the HTTP stack turned that into an error or
    an ended stream instead: the run must stop, not go on to its next request."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


async def send(
    client: Any,
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
    body: dict[str, Any] = {"ignore_eos": True} if ignore_eos else {}
    body.update(extra_body or {})
    start = time.perf_counter()
    result = RequestResult(ok=False, start=start - level_start, max_tokens=request.max_tokens)
    last: float | None = None
    usage = None
    stream = None
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=list(request.messages),
            max_tokens=request.max_tokens,
            temperature=temperature,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=body,
        )
        async for chunk in stream:
            now = time.perf_counter()
            if getattr(chunk, "usage", None) is not None:
                usage = chunk.usage
            for choice in chunk.choices or ():
                delta = choice.delta
                text = (delta.content or "") if delta is not None else ""
                if not text and delta is not None:
                    text = getattr(delta, "reasoning_content", None) or ""
                if text:
                    result.content_chunks += 1
                    if last is None:
                        result.ttft = now - start
                    else:
                        result.itl.append(now - last)
                    last = now
                if choice.finish_reason:
                    result.finish_reason = choice.finish_reason
        result.e2e = time.perf_counter() - start
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        _still_cancelled(exc)
        result.e2e = time.perf_counter() - start
        result.error = describe_error(exc)
        return result
    finally:
        if stream is not None:
            try:  # bounded: an interrupted run must not wait on a connection that will not close
                await asyncio.wait_for(stream.close(), 5.0)
            except Exception:  # the connection is already gone, or would not close in time
                log.debug("closing a stream failed", exc_info=True)
    if usage is not None and getattr(usage, "completion_tokens", None) is not None:
        result.output_tokens = int(usage.completion_tokens)
        result.prompt_tokens = getattr(usage, "prompt_tokens", None)
        result.token_source = "usage"
        result.draft_tokens, result.accepted_draft_tokens = _drafts(usage)
        cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
        result.cached_tokens = int(cached) if cached is not None else None
    else:
        result.output_tokens = result.content_chunks
    if result.finish_reason is None:
        result.error = "the stream ended without a finish_reason"
    elif result.ttft is None:
        result.error = f"no tokens streamed (finish_reason {result.finish_reason})"
    else:
        result.ok = True
    return result
