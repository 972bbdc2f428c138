"""Chunks reach an event loop once per step of the loop that produced them, with no thread per stream."""

from __future__ import annotations

import asyncio
import threading

import pytest

from engine.backends.delivery import ChunkQueue, delivery_batch
from engine.backends.runtime import StreamChunks
from engine.server.streaming import coalesce, merge_streams
from engine.tools.parsers import ToolCallDelta
from engine.types import GenerationChunk, GenerationRequest, TokenLogprob

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
    # every step's text in order (a reader that fell behind gets several steps' pieces as one chunk)
    assert all("".join(texts) == "".join(str(s) for s in range(STEPS)) for texts in got.values())
    assert 1 <= len(wakes) <= STEPS  # one wake-up per step at most, for all eight streams


def test_a_reader_that_fell_behind_gets_one_chunk_for_the_pieces_waiting_and_keeps_their_order():
    lp = [TokenLogprob(token=t, token_id=i, logprob=-0.5, bytes=tuple(t.encode())) for i, t in enumerate("abcdef")]
    call = ToolCallDelta(index=0, id="call_1", name="f", arguments="")
    chunks = [
        GenerationChunk(reasoning="th", token_ids=(1,), logprobs=(lp[0],)),
        GenerationChunk(reasoning="ink", token_ids=(2,), logprobs=(lp[1],)),
        GenerationChunk(text="He", token_ids=(3,), logprobs=(lp[2],)),
        GenerationChunk(text="llo", token_ids=(4,), logprobs=(lp[3],)),
        GenerationChunk(tool_call_deltas=(call,), token_ids=(5,)),
        GenerationChunk(text="!", token_ids=(6,)),
        GenerationChunk(text="", finish_reason="stop", completion_tokens=6),
    ]
    out = coalesce(chunks)
    assert [(c.reasoning, c.text, c.token_ids) for c in out] == [
        ("think", "", (1, 2)), ("", "Hello", (3, 4)), ("", "", (5,)), ("", "!", (6,)), ("", "", ()),
    ]  # fmt: skip
    assert out[0].logprobs == (lp[0], lp[1]) and out[1].logprobs == (lp[2], lp[3])
    assert out[2].tool_call_deltas == (call,) and out[-1].finish_reason == "stop"
    assert coalesce(chunks[:1]) == chunks[:1]


def test_streams_taken_at_an_interval_never_wait_for_their_first_or_last_chunk():
    from engine.backends.delivery import LoopWaker

    async def run() -> None:
        waker = LoopWaker(asyncio.get_running_loop())
        waker.interval = 0.2
        ran: list[str] = []

        async def turns() -> None:  # long enough for the loop to run what is due, far short of the interval
            for _ in range(5):
                await asyncio.sleep(0)

        waker.ready(1, lambda: ran.append("a"))
        await turns()
        assert ran == ["a"]  # nothing was taken yet: at once
        waker.ready(1, lambda: ran.append("a"))
        waker.ready(2, lambda: ran.append("b"))
        await turns()
        assert ran == ["a"]  # held to the interval
        waker.ready(3, lambda: ran.append("c-first"), urgent=True)
        await turns()
        assert ran == ["a", "c-first"]  # a first or last chunk is not held
        waker.ready(2, lambda: ran.append("b-last"), urgent=True)
        await turns()
        assert ran == ["a", "c-first", "b-last"]  # once, urgent, though it was also waiting for the interval
        await asyncio.sleep(0.35)
        assert ran == ["a", "c-first", "b-last", "a"]  # the others when the interval has passed, each once
        await asyncio.sleep(0.25)
        waker.ready(1, lambda: ran.append("a"))
        await turns()
        assert ran[-1] == "a" and len(ran) == 5  # the interval has passed since the last take: at once

    asyncio.run(run())


def test_the_stream_interval_is_milliseconds_within_a_second():
    from engine.backends.delivery import parse_interval
    from engine.errors import InvalidRequest

    assert parse_interval("0") == 0 and parse_interval("40") == 40 and parse_interval(" 25ms ") == 25
    for bad in ("-5", "fast", "2000", "nan", "inf", ""):
        with pytest.raises(InvalidRequest, match="milliseconds from 0 to 1000"):
            parse_interval(bad)


def test_a_chunk_queue_marks_its_chunks_up_to_the_first_token_and_its_last_as_urgent():
    from engine.backends.delivery import LoopWaker

    marks: list[bool] = []

    class Waker(LoopWaker):
        def __init__(self) -> None:
            pass

        def ready(self, key, callback, *, urgent=False) -> None:
            marks.append(urgent)

    q = ChunkQueue()
    q.listen(Waker(), lambda: None)
    q.put(GenerationChunk(text=""))  # no token yet (a prompt's progress)
    q.put(GenerationChunk(text="a", token_ids=(1,)))
    q.put(GenerationChunk(text="b", token_ids=(2,)))
    q.put(GenerationChunk(text="", finish_reason="stop"))
    assert marks == [True, True, True, False, True]
