"""Chat with a remote provider's model from synchronous code (`hearth chat --model PROVIDER/MODEL`).

The same request the app and the API forward, sent straight to the provider with its own key:
the answer streams back as :class:`engine.types.GenerationChunk` items, like a local backend's,
and every failure ends the stream with one chunk whose ``finish_reason`` is ``error``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx

from engine import __version__
from engine.errors import RemoteError, RemoteStreamCut
from engine.remote.client import FORWARDED_HEADER, MAX_ERROR_BYTES, status_error, transport_error
from engine.remote.providers import ProviderAccess, ProviderStore, split_model_id
from engine.sse import DONE, SseParser
from engine.types import GenerationChunk, GenerationRequest

log = logging.getLogger(__name__)


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


class RemoteChat:
    """A provider's model behind the small part of the backend protocol a chat needs:
    :meth:`stream` and :meth:`close`.

    Args:
        access: The provider and its key.
        remote_id: The model's id at the provider.
        name: The model's public ``provider/model`` id.
    """

    def __init__(self, access: ProviderAccess, remote_id: str, *, name: str | None = None) -> None:
        self.access = access
        self.remote_id = remote_id
        self.name = name or f"{access.name}/{remote_id}"
        self._http = httpx.Client(
            headers={"User-Agent": f"hearth/{__version__}", FORWARDED_HEADER: "1"},
            follow_redirects=True,
            trust_env=False,
        )

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        p = request.params
        body: dict[str, Any] = {
            "model": self.remote_id,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages or ()],
            "stream": True,
            "temperature": p.temperature,
            "top_p": p.top_p,
        }
        if p.max_tokens is not None:
            body["max_tokens"] = p.max_tokens
        if p.seed is not None:
            body["seed"] = p.seed
        if p.stop:
            body["stop"] = list(p.stop)
        return body

    def stream(self, request: GenerationRequest) -> Iterator[GenerationChunk]:
        """The answer, chunk by chunk; closing the iterator closes the connection (the provider
        stops generating)."""
        access = self.access
        seconds = access.provider.timeout
        started = time.monotonic()
        first: float | None = None
        pieces = 0
        finish = None
        try:
            with self._http.stream(
                "POST",
                f"{access.base_url}/chat/completions",
                json=self._body(request),
                headers={**access.headers(), "Accept": "text/event-stream"},
                timeout=httpx.Timeout(seconds, connect=min(5.0, seconds)),
            ) as response:
                if response.status_code >= 400:
                    content = b""
                    for part in response.iter_bytes():
                        content += part
                        if len(content) >= MAX_ERROR_BYTES:
                            break
                    raise status_error(response.status_code, content, access)
                parser = SseParser()
                done = False
                for raw in response.iter_bytes():
                    for data in parser.feed(raw):
                        done = done or data.strip() == DONE
                        for text, reason in [] if done else _deltas(data):
                            finish = reason or finish
                            if text:
                                first = first if first is not None else time.monotonic() - started
                                pieces += 1
                                yield GenerationChunk(text=text)
                    if done:
                        break
                if not done and finish is None:
                    raise RemoteStreamCut(provider=access.name, url=access.base_url, reason="no end of answer")
        except httpx.HTTPError as exc:
            error = transport_error(exc, access, seconds)
            yield GenerationChunk(finish_reason="error", completion_tokens=pieces, error=str(error))
            return
        except RemoteError as exc:
            yield GenerationChunk(finish_reason="error", completion_tokens=pieces, error=str(exc))
            return
        elapsed = time.monotonic() - started - (first or 0.0)
        yield GenerationChunk(
            finish_reason=finish if finish in ("stop", "length") else "stop",
            completion_tokens=pieces,
            time_to_first_token=first,
            tokens_per_second=pieces / elapsed if pieces and elapsed > 0 else None,
        )

    def close(self) -> None:
        self._http.close()


def _deltas(data: str) -> list[tuple[str, str | None]]:
    """``(text, finish_reason)`` of each choice of one streamed event (malformed events are skipped)."""
    try:
        event = json.loads(data)
    except ValueError:
        log.debug("skipping a non-JSON event: %.80s", data)
        return []
    choices = event.get("choices") if isinstance(event, dict) else None
    out = []
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        text = delta.get("content") if isinstance(delta.get("content"), str) else ""
        reason = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None
        out.append((text, reason))
    return out


__all__ = ["RemoteChat", "find_remote"]
