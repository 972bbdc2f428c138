"""`hearth chat` through the worker of this data folder (the daemon's), started when none runs, as `ollama run`
uses Ollama's server: the chat shares the loaded model, its saved settings and its slots with every other
client, and shows in `hearth ps` and `hearth log stream`. `hearth chat --local` runs the model in-process.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.commands.chat_reply import Reply, thinking_out
from engine.commands.worker_client import WorkerClient

if TYPE_CHECKING:
    import httpx


def daemon_client(purpose: str = "this chat") -> WorkerClient:
    """The running daemon's worker, or a daemon started now (on the usual port, else any free one).

    Raises:
        DaemonError: it could not be started.
    """
    from engine.worker.daemon import DEFAULT_PORT, find_daemon, start_daemon
    from engine.worker.net import bind_socket

    info = find_daemon()
    if info is None:
        try:
            bind_socket("127.0.0.1", DEFAULT_PORT).close()
            port = DEFAULT_PORT
        except OSError:  # the usual port is someone else's: the daemon.json names whichever it gets
            port = 0
        print(f"Starting the Hearth daemon for {purpose}; it keeps running (`hearth daemon down` stops it).",
              file=sys.stderr)  # fmt: skip
        info = start_daemon(port=port)
    return WorkerClient(info.url, info.admin_key)


class WorkerChat:
    """One conversation's answers from ``model`` in the worker ``client`` talks to, streamed to the terminal.

    Args:
        client: The worker.
        model: The model's name, as the worker knows it.
    """

    def __init__(self, client: WorkerClient, model: str) -> None:
        self.client = client
        self.model = model

    def load(self, ctx: int | None, keep_alive: float | None = None) -> None:
        """Load the model now (with ``ctx`` tokens of context for this load, when given, and kept ``keep_alive``
        seconds once idle, -1 for ever), so that a model that cannot load says so before the first question.

        Raises:
            HearthError: the worker's reason.
        """
        body: dict[str, Any] = {"model": self.model}
        if ctx is not None:
            body["ctx"] = ctx
        if keep_alive is not None:
            body["keep_alive"] = "never" if keep_alive < 0 else keep_alive
        self.client.request("POST", "/api/models/load", body=body, timeout=600.0)

    def answer(self, history: Sequence[dict[str, Any]], fields: dict[str, Any], *, show_stats: bool,
               show_thinking: bool = True) -> Reply:  # fmt: skip
        """Stream the answer to ``history``, asked with the request ``fields`` (sampling, format, thinking; the
        model's own settings holding for the rest), to stdout (its thinking dimmed, or left out) and return it (Ctrl-C stops it: the worker cancels the
        generation when the stream closes; an error the stream ends with is said on stderr).

        Raises:
            HearthError: the worker refused the request (an unknown model, a model that cannot chat, ...).
        """
        import httpx

        body = {"model": self.model, "messages": list(history), "stream": True,
                "stream_options": {"include_usage": True}, **fields}  # fmt: skip
        parts: list[str] = []
        started = time.monotonic()
        first: float | None = None
        usage: dict[str, Any] = {}
        thinking = False
        aside = thinking_out()
        timeout = httpx.Timeout(30.0, read=None)
        try:
            with httpx.stream("POST", f"{self.client.url}/v1/chat/completions", json=body,
                              headers=self.client.headers, timeout=timeout) as r:  # fmt: skip
                if r.status_code >= 400:
                    r.read()
                    raise self.client.fail(r)
                for event in _events(r):
                    if "error" in event:
                        sys.stdout.write("\n")
                        print(f"hearth: {event['error'].get('message', event['error'])}", file=sys.stderr)
                        return Reply("".join(parts), failed=True)
                    usage = event.get("usage") or usage
                    for choice in event.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if delta.get("reasoning_content") and show_thinking:  # thinking, dimmed, before the answer (docs/tools.md)
                            aside.write(_dim(delta["reasoning_content"]))
                            thinking = True
                        if delta.get("content"):
                            first = first or time.monotonic()
                            if thinking:
                                aside.write("\n")
                                thinking = False
                            parts.append(delta["content"])
                            sys.stdout.write(delta["content"])
                        aside.flush()
                        sys.stdout.flush()
        except KeyboardInterrupt:
            sys.stdout.write(" [stopped]\n")  # leaving the block closed the stream: the worker cancelled it
            return Reply("".join(parts), stopped=True)
        except httpx.HTTPError as exc:
            raise self.client.unreachable(exc) from exc
        sys.stdout.write("\n")
        if show_stats and usage:
            _print_stats(usage, started, first)
        return Reply("".join(parts))


def _events(r: httpx.Response):
    for line in r.iter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data == "[DONE]":
                return
            yield json.loads(data)


def _print_stats(usage: dict[str, Any], started: float, first: float | None) -> None:
    tokens = int(usage.get("completion_tokens") or 0)
    elapsed = time.monotonic() - (first or started)
    ttft = f"{(first - started) * 1000:.0f} ms" if first is not None else "-"
    tps = f"{(tokens - 1) / elapsed:.1f}" if tokens > 1 and elapsed > 0 else "-"
    print(f"[{tokens} tokens, {tps} tokens/s, first token {ttft}]", file=sys.stderr)


def _dim(text: str) -> str:
    """``text`` dimmed on a terminal (SGR 2), as is when piped."""
    return f"\x1b[2m{text}\x1b[0m" if sys.stdout.isatty() else text


__all__ = ["WorkerChat", "daemon_client"]
