"""Errors `hearth bench` reports to a user in one line."""

from __future__ import annotations

from engine.errors import HearthError


class BenchError(HearthError):
    """A benchmark cannot run as asked: a bad flag, a workload file, a server that does not answer."""


class ServerUnreachable(BenchError):
    """No OpenAI-compatible server answers at a URL."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        super().__init__(f"No server answers at {url} ({reason}); start it or check the URL.")
