"""A Ctrl-C ends `hearth bench` even where the HTTP stack turns the cancellation into an error of the request."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from engine.bench.client import send
from engine.bench.workload import BenchRequest


class _SwallowingClient:
    """A chat client whose transport turns a cancellation into a connection error, as an HTTP stack can when
    the cancel lands while it tears down a connection."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.calls = 0

    async def events(self, body: dict):
        self.calls += 1
        self.started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError as exc:
            raise aiohttp.ClientConnectionError("connection closed") from exc
        raise AssertionError("not reached")
        yield {}


def test_a_cancelled_request_ends_the_run_even_when_its_transport_reports_an_error():
    client = _SwallowingClient()
    request = BenchRequest(messages=({"role": "user", "content": "hi"},), max_tokens=4)

    async def run_requests() -> None:
        for _ in range(3):  # a run's worker: one request after another
            await send(client, "m", request, level_start=0.0)

    async def main() -> None:
        task = asyncio.create_task(run_requests())
        await client.started.wait()
        task.cancel()  # what asyncio.run does on Ctrl-C
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert client.calls == 1  # no request was sent after the cancel
