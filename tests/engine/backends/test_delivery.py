"""Chunks reach an event loop once per step of the loop that produced them, with no thread per stream."""

from __future__ import annotations

import asyncio
import threading

from engine.backends.delivery import ChunkQueue, delivery_batch
from engine.backends.runtime import StreamChunks
from engine.server.streaming import merge_streams
from engine.types import GenerationChunk, GenerationRequest

STEPS = 20


class Backend:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, request_id: str) -> None:
        self.cancelled.append(request_id)


def test_a_step_of_many_streams_wakes_the_event_loop_once_and_no_thread_waits_per_stream():
    queues = [ChunkQueue() for _ in range(8)]
    streams = [StreamChunks(q, lambda: None, None) for q in queues]
    requests = [GenerationRequest(model="m", prompt="p") for _ in queues]
    wakes = []
    got: dict[int, list[str]] = {i: [] for i in range(len(queues))}

    async def consume() -> int:
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counted(callback, *args):
            wakes.append(callback)
            return real(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        started = threading.Event()
        proceed = threading.Event()

        def produce() -> None:  # a generation loop: each step gives every stream one chunk
            started.set()
            proceed.wait()
            for step in range(STEPS):
                with delivery_batch():
                    for q in queues:
                        last = step == STEPS - 1
                        q.put(GenerationChunk(text=str(step), finish_reason="length" if last else None))

        producer = threading.Thread(target=produce)
        producer.start()
        started.wait()
        threads_before = threading.active_count()
        merged = merge_streams(Backend(), requests, streams)
        first = asyncio.ensure_future(merged.__anext__())
        await asyncio.sleep(0)  # the streams are listened to
        most_threads = threading.active_count()
        proceed.set()
        index, chunk = await first
        got[index].append(chunk.text)
        async for index, chunk in merged:
            got[index].append(chunk.text)
        producer.join()
        return most_threads - threads_before

    extra_threads = asyncio.run(consume())
    assert extra_threads == 0
    assert all(texts == [str(s) for s in range(STEPS)] for texts in got.values())
    assert 1 <= len(wakes) <= STEPS  # one wake-up per step at most, for all eight streams
