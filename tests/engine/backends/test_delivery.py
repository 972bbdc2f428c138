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
    # one wake-up as the eight streams are listened to (for chunks already there), then one a step at most for all eight
    assert 1 <= len(wakes) <= STEPS + 1


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


class FakeLoop:
    """The parts of an event loop a waker uses, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0
        self.soon: list = []
        self.timers: list = []

    def time(self) -> float:
        return self.now

    def call_soon_threadsafe(self, callback, *args) -> None:
        self.soon.append(callback)

    def call_later(self, delay: float, callback) -> None:
        self.timers.append((self.now + delay, callback))

    def turn(self, seconds: float = 0.0) -> None:
        """Move the clock, then run what is due: the timers that came due, and every call made soon."""
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, callback in due:
            callback()
        while self.soon:
            self.soon.pop(0)()


def test_streams_taken_at_an_interval_never_wait_for_their_first_or_last_chunk():
    from engine.backends.delivery import LoopWaker

    loop = FakeLoop()
    waker = LoopWaker(loop)  # type: ignore[arg-type]
    waker.interval = 0.2
    ran: list[str] = []
    mark = lambda key, name, urgent=False: waker.ready(key, lambda: ran.append(name), urgent=urgent)  # noqa: E731

    mark(1, "a")
    loop.turn()
    assert ran == ["a"]  # nothing was taken yet: at once
    mark(1, "a")
    mark(2, "b")
    loop.turn(0.05)
    assert ran == ["a"] and len(loop.timers) == 1  # held to the interval, one timer for all
    mark(3, "c-first", urgent=True)
    loop.turn(0.05)
    assert ran == ["a", "c-first"]  # a first or last chunk is not held
    mark(2, "b-last", urgent=True)
    loop.turn(0.05)
    assert ran == ["a", "c-first", "b-last"]  # once, urgent, though it was also waiting for the interval
    mark(1, "a")  # held already: no new wake-up, the timer takes it
    assert not loop.soon
    loop.turn(0.1)
    assert ran == ["a", "c-first", "b-last", "a"] and not loop.timers  # the others at the interval, each once
    loop.turn(0.25)
    mark(1, "a")
    loop.turn()
    assert len(ran) == 5 and not loop.timers  # the interval has passed since the last take: at once
    waker.interval = 0.0
    for _ in range(3):
        mark(1, "a")
        loop.turn()
    assert len(ran) == 8 and not loop.timers  # no interval: every wake-up takes every stream, no timer


def test_a_timer_that_finds_its_streams_gone_starts_no_new_interval():
    from engine.backends.delivery import LoopWaker

    loop = FakeLoop()
    waker = LoopWaker(loop)  # type: ignore[arg-type]
    waker.interval = 0.2
    ran: list[str] = []
    waker.ready(1, lambda: ran.append("x"))
    loop.turn()
    waker.ready(1, lambda: ran.append("x"))
    loop.turn(0.01)  # held
    waker.ready(1, lambda: ran.append("x-last"), urgent=True)
    loop.turn(0.01)
    loop.turn(0.2)  # the timer fires with nothing left to take
    waker.ready(2, lambda: ran.append("y"))
    loop.turn()
    assert ran == ["x", "x-last", "y"]  # at once: the last take of every stream was 0.22 s ago


def test_the_stream_interval_is_milliseconds_within_a_second():
    from engine.backends.delivery import parse_interval
    from engine.errors import InvalidRequest

    assert parse_interval("0") == 0 and parse_interval("40") == 40 and parse_interval(" 25ms ") == 25
    for bad in ("-5", "fast", "2000", "nan", "inf", ""):
        with pytest.raises(InvalidRequest, match="milliseconds from 0 to 1000"):
            parse_interval(bad)


def test_a_chunk_queue_marks_its_chunks_up_to_the_first_text_and_its_last_as_urgent():
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
    q.put(GenerationChunk(text="", token_ids=(0xE2,)))  # half a character: nothing to show yet
    q.put(GenerationChunk(text="\u2014", token_ids=(0x80,)))
    q.put(GenerationChunk(text="b", token_ids=(2,)))
    q.put(GenerationChunk(text="", finish_reason="stop"))
    assert marks == [True, True, True, True, False, True]


def test_a_reader_that_raises_does_not_keep_the_others_of_its_batch_waiting():
    from engine.backends.delivery import LoopWaker

    loop = FakeLoop()
    failures: list[dict] = []
    loop.call_exception_handler = failures.append  # type: ignore[attr-defined]
    waker = LoopWaker(loop)  # type: ignore[arg-type]
    ran: list[int] = []

    def broken() -> None:
        raise ValueError("bad chunk")

    waker.ready(1, broken)
    waker.ready(2, lambda: ran.append(2), urgent=True)
    waker.ready(3, lambda: ran.append(3))
    loop.turn()
    assert ran == [2, 3] and len(failures) == 1 and isinstance(failures[0]["exception"], ValueError)
