"""Keep-alives while a stream's prompt is read (engine.server.streaming.ticks): a long prompt on a CPU takes
minutes, and proxies and clients' byte watchdogs give up on a silent connection."""

from __future__ import annotations

import asyncio

from engine.server.streaming import ticks


def test_ticks_come_until_the_first_item_and_then_the_items_alone():
    async def slow_start():
        await asyncio.sleep(0.35)
        for i in range(3):
            yield i
            await asyncio.sleep(0.15)  # gaps after the first: no ticks in them

    async def run():
        return [item async for item in ticks(slow_start(), 0.1)]

    got = asyncio.run(run())
    assert got[-3:] == [0, 1, 2] and set(got[:-3]) == {None} and 2 <= len(got) - 3 <= 4


def test_a_client_that_leaves_before_the_first_item_ends_the_stream_it_waited_on():
    closed = []

    async def never():
        try:
            await asyncio.sleep(60)
            yield 1
        finally:
            closed.append(True)

    async def run():
        stream = ticks(never(), 0.05)
        assert await anext(stream) is None  # a keep-alive, then the client goes
        await stream.aclose()

    asyncio.run(run())
    assert closed == [True]


def test_an_error_before_the_first_item_reaches_the_reader():
    async def failing():
        await asyncio.sleep(0.01)
        raise RuntimeError("the engine stopped")
        yield  # pragma: no cover

    async def run():
        return [item async for item in ticks(failing(), 1.0)]

    try:
        asyncio.run(run())
    except RuntimeError as exc:
        assert str(exc) == "the engine stopped"
    else:
        raise AssertionError("the error was lost")


def test_a_request_cancelled_while_its_stream_opens_is_cancelled_and_closed_once_it_is_open():
    """A client that goes (or a background response cancelled) while the backend opens its stream in a thread: the
    thread still opens it, and it is cancelled and closed then, not left generating for nobody."""
    import threading

    from engine.server.streaming import open_streams
    from engine.types import GenerationRequest

    opening, events = threading.Event(), []

    class Backend:
        def stream(self, request):
            opening.set()
            time_to_open.wait(5)

            class Chunks:
                def __iter__(self):
                    return self

                def __next__(self):
                    raise StopIteration

                def close(self):
                    events.append("closed")

            return Chunks()

        def cancel(self, request_id):
            events.append(("cancel", request_id))

    time_to_open = threading.Event()
    req = GenerationRequest(model="m", prompt="hi")

    async def run():
        task = asyncio.ensure_future(open_streams(Backend(), [req]))
        await asyncio.to_thread(opening.wait, 5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert events == []  # the stream is not open yet
        time_to_open.set()
        for _ in range(100):
            if events:
                break
            await asyncio.sleep(0.02)

    asyncio.run(run())
    assert events == [("cancel", req.request_id), "closed"]
